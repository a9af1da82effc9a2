"""Conversation core: messages, bus, the agent loop (locks, gate, pending queue), persistence, engines."""
