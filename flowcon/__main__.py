"""``python3 -m flowcon``: the ``flowcon`` command."""

from flowcon.cli import main

main()
