"""What runs inside sglang-omni's pipeline process, not the server's: it imports nothing of the service."""
