# Sourced by scripts/bench-wrk and scripts/profile-hop: what both need to
# drive a 2026-07-28 resources/read at Manifold with wrk.

# free_port prints a port that was free a moment ago.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# wait_healthz PORT waits (10 s at most) for Manifold's /healthz on PORT.
wait_healthz() { for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$1/healthz" && break; sleep 0.1; done; }

# cpu PID prints the CPU seconds (user + system) PID has used so far.
cpu() { awk '{print ($14 + $15) / '"$(getconf CLK_TCK)"'}' "/proc/$1/stat"; }

# modern_read URI LUA sets body and hdr (curl's -H arguments) to a modern
# caller's read of URI, and writes the same request as wrk's script LUA.
modern_read() {
  body='{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"'$1'","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
  hdr=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: resources/read' -H "Mcp-Name: $1")
  cat > "$2" <<LUA
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "resources/read"
wrk.headers["Mcp-Name"] = "$1"
LUA
}
