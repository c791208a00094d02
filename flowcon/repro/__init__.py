"""Reproductions for comparison, not the product: the published ElasticFlow simulator's
policies, baselines and event loop (``flowcon simulate --world published``), and the
ElasticFlow paper's algorithms as printed, the slow reference the tests hold the fast code
in flowcon/alloc to. They may import flowcon.alloc and flowcon.sim; neither imports them
except through flowcon/policy_registry.py and the ``simulate`` command."""
