"""The scheduling policies the papers compare against (ElasticFlow's and Saxena et al.'s
evaluations, and the elastic schedulers added beside them), and FlowCon's batch-size-aware
research variant. They build on flowcon.alloc; flowcon.alloc never imports them. Chosen by
name in flowcon/policy_registry.py."""
