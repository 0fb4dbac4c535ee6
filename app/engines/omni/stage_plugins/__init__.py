"""What vllm-omni loads by dotted path inside its own stage processes: the code2wav (stage 1) scheduler and the
bookkeeping it keeps, and the talker's (stage 0) window producer. These modules import nothing of the service outside
this package (the stage processes run vllm-omni, not the service), which tests/unit/test_import_graph.py checks."""
