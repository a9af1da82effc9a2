"""MCP tools: server-side MCP clients, the device MCP client, and the router between them."""
