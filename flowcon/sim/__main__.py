"""``python -m flowcon.sim --trace ...``: the simulator without the ``flowcon`` command group
(skips its logging setup and subcommand discovery; same options as ``flowcon simulate``)."""

from flowcon.sim.cli import simulate

if __name__ == "__main__":
    simulate(prog_name="python -m flowcon.sim")
