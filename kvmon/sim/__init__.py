"""A physics-driven simulated llama-server and Ollama over real HTTP (demo and test bed)."""
