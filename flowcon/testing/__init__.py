"""What the tests and the benchmarks both need at run time: stand-in jobs (``ratejob``,
``stepjob``), a private Docker engine (``private_engine``), free ports (``ports``). Nothing
in the product imports it."""
