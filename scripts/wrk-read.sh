# Sourced by scripts/bench-wrk and scripts/profile-hop: what both need to
# drive a resources/read at Manifold with wrk, from a 2026-07-28 caller or
# in a 2025-11-25 session.

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

# legacy_read URI LUA PORT opens a 2025-11-25 session at Manifold on PORT
# (initialize, then notifications/initialized), sets body and hdr to a
# read of URI in it, and writes the same request as wrk's script LUA.
legacy_read() {
  local init='{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"1"}}}'
  local sid
  sid=$(curl -s -D - -o /dev/null -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' "http://127.0.0.1:$3/mcp" -d "$init" | tr -d '\r' | awk -F': ' 'tolower($1) == "mcp-session-id" {print $2}')
  [ -n "$sid" ] || { echo "legacy_read: no session from initialize" >&2; return 1; }
  hdr=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-11-25' -H "Mcp-Session-Id: $sid")
  curl -s -o /dev/null "${hdr[@]}" "http://127.0.0.1:$3/mcp" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  body='{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"'$1'"}}'
  cat > "$2" <<LUA
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
wrk.headers["Mcp-Session-Id"] = "$sid"
LUA
}
