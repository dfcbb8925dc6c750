"""The server's lifecycle: start, the engine watch and recovery, health, the sandbox supply, idle reaping, close."""
