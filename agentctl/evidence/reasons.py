"""The registry of reason codes: every stable code agentctl can emit, what it means and what to do about it.

Status lines show a code's plain-language meaning and keep the bare code as detail; docs/troubleshooting.md
carries the same table, generated from this one (`python -m agentctl.evidence.reasons --doc PATH`, run by
`make schema`). A test reads agentctl's source for every code it can emit and fails when one is missing
here or in the doc. Adding a code is one line in TABLE.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

Where = Literal["row", "session", "agent", "endpoint_test", "upstream", "control", "tools", "report"]


class Reason(NamedTuple):
    code: str
    where: Where  # the surface it shows on first (several codes show on more than one)
    meaning: str  # plain language, lower case, completes "<server|session|test>: ..."
    action: str  # what to do, one or two sentences


# One row per code: (code, where, what it means, what to do). Kept sorted within each group.
TABLE: tuple[Reason, ...] = tuple(Reason(*row) for row in (
    # ---- server rows: failed (an explicit, attributable attachment error) ------------------------------------
    ("agent_reported_failed", "row", "the agent itself reported that this server failed to connect (reported by the agent, not observed by agentctl)", "Read the summary (the agent's words, redacted); check that the server runs at its URL or command, and test reachability from the daemon with `agentctl test-endpoint NAME`."),
    ("agent_exposure_gap", "report", "the agent does not expose to its model every tool the built-in endpoint served it (the agent's own tool list, compared with agentctl's catalog)", "The missing tools are named beside the row: check the agent's tool filters (allowed/disallowed tools, permissions) and whether its tool list was cut; the endpoint served them."),
    ("agent_reported_needs_auth", "row", "the agent itself reported that this server needs authentication first (reported by the agent, not observed by agentctl)", "Give the server its credentials in the profile (headers or env), or log the agent in to it (for example `codex mcp login NAME`, or `/mcp` in Claude Code)."),
    ("attachment_error", "row", "an attachment error was reported for this server without a reason", "Read the summary beside the code and the agent's output (`agentctl stderr`)."),
    ("initialize_failed", "row", "an MCP initialize request failed", "On the built-in row: a client sent an initialize the endpoint refused; a later successful initialize or tools/list of the attempt clears it. In an endpoint test: the server refused the test's initialize."),
    ("session_pool_full", "row", "the built-in endpoint refused the agent a legacy MCP session (503): every session within the bound was busy", "Look at the agent's output (`agentctl stderr`) for a client that opens sessions and keeps a stream open on each; the row recovers once a session is free."),
    ("session_rejected", "row", "the agent refused the session", "Read the agent's message in the summary; when it names a server, only that row is failed. `agentctl stderr` often has the cause."),
    ("tools_list_failed", "row", "an MCP tools/list request failed", "On the built-in row: a client's tools/list was refused (for example a malformed cursor); a later successful tools/list clears it. In an endpoint test: the server failed to list its tools."),
    ("witness_server_exited", "row", "agentctl's stdio witness saw the server exit on its own before it answered the agent (observed by agentctl's witness)", "Run the server's command by hand with the same environment to see why it ends; its stderr is in the agent's output (`agentctl stderr`)."),
    ("witness_server_not_started", "row", "agentctl's stdio witness could not start the server's command (observed by agentctl's witness)", "Check the server's command in the spec: the program exists, is executable and is on the agent's PATH."),
    # ---- server rows: filtered (deliberately not sent) and unavailable ---------------------------------------
    ("duplicate_name", "row", "not sent: another server of this attempt already uses the name", "Rename one of the servers in the profile."),
    ("env_unsupported_by_strategy", "row", "not sent: this CLI cannot be given the server's environment as configured", "Read the summary for the variable; give it another name or drop it from the server's env."),
    ("excluded_by_workspace_settings", "row", "not sent: the CLI's workspace settings exclude this server", "Remove the server from the workspace's exclude list, or add it to its allow list."),
    ("http_unsupported", "row", "not sent: the agent does not advertise MCP over HTTP", "Use an agent (or version) that advertises http in mcpCapabilities, or configure the server as stdio."),
    ("http_unsupported_by_strategy", "row", "not sent: this CLI's configuration cannot express an HTTP server", "Configure the server with a transport this CLI supports, or run the agent over ACP."),
    ("materialize_failed", "row", "unavailable: agentctl could not write the CLI's MCP configuration", "Check that the agent's working directory exists and is writable; the summary names what failed."),
    ("name_unsupported_by_strategy", "row", "not sent: this CLI does not accept the server's name", "Rename the server (letters, digits, '-' and '_'; not a name the CLI reserves)."),
    ("no_passthrough_strategy", "row", "unavailable: agentctl has no way to give MCP servers to this CLI", "Set agent.strategy to a supported CLI (claude, codex, gemini, opencode, cursor) or run the agent over ACP."),
    ("no_supported_transport", "row", "not sent: the agent advertises neither MCP over HTTP nor over SSE", "The built-in server needs http or sse, or stdio through agentctl's bridge: allow stdio and http or sse in the spec's [policy] transports, or use an agent that advertises http (see the agent line of `agentctl diagnostics`)."),
    ("policy_denied", "row", "not sent: the executor policy does not allow this transport", "Allow the transport in the spec's [policy] transports if the server should be sent."),
    ("sse_unsupported", "row", "not sent: the agent does not advertise MCP over SSE", "Use an agent that advertises sse in mcpCapabilities, or configure the server over http or stdio."),
    ("sse_unsupported_by_strategy", "row", "not sent: this CLI's configuration cannot express an SSE server", "Configure the server with a transport this CLI supports, or run the agent over ACP."),
    ("stdio_unsupported_by_strategy", "row", "not sent: this CLI's configuration cannot express a stdio server", "Configure the server with a transport this CLI supports, or run the agent over ACP."),
    ("untrusted_folder", "row", "disabled by the agent: Gemini CLI does not trust the working directory, so it starts none of its MCP servers", "Trust the folder in Gemini (`gemini` in that folder, then \"Trust folder\"; or a `TRUST_FOLDER` rule for it in ~/.gemini/trustedFolders.json), or let this run skip the check with `--skip-trust` or `GEMINI_CLI_TRUST_WORKSPACE=true` in the agent's command or environment. agentctl never changes your Gemini settings."),
    # ---- session errors (report level: no row is failed) and agent answers -----------------------------------
    ("agent_exited", "session", "the agent process exited", "See how it ended in `agentctl diagnostics` (code or signal) and its last output in `agentctl stderr`; start a new execution."),
    ("agent_not_running", "session", "there is no running agent to ask", "The agent exited or never started: see `agentctl diagnostics`."),
    ("agent_exited_before_initialize", "agent", "the agent exited before answering ACP initialize; it declared no transports, so nothing was filtered", "Look at `agentctl stderr`; fix the agent's command or environment."),
    ("agent_starting", "agent", "the agent has not answered ACP initialize yet", "Retry; if it persists, raise agent.initialize_timeout or check the agent's start with `agentctl stderr`."),
    ("agent_start_failed", "session", "the agent command could not be started", "Check agent.command in the spec: the executable exists, is executable and is on PATH."),
    ("session_error", "session", "the agent's answer to the session request could not be used", "Read the summary; `agentctl stderr` shows what the agent printed. The servers keep their evidence."),
    ("session_timeout", "session", "the agent did not answer the session request in time", "Check whether the agent is stuck (`agentctl stderr`) or raise agent.session_timeout."),
    ("cancel_timeout", "agent", "the agent did not take the cancel in time", "The prompt may still be running; stop the daemon if it does not end."),
    ("initialize_invalid", "agent", "the agent's answer to ACP initialize could not be read", "The agent does not speak ACP as expected: check its version and `agentctl stderr`."),
    ("initialize_rejected", "agent", "the agent answered ACP initialize with an error", "Read the summary and `agentctl stderr`; the agent may need credentials or a newer protocol."),
    ("initialize_timeout", "agent", "the agent did not answer ACP initialize in time", "Check that the command is an ACP agent (not a plain CLI) or raise agent.initialize_timeout."),
    ("internal_error", "agent", "agentctl failed unexpectedly on this request", "The daemon's log has the details; please report it."),
    ("no_session", "agent", "there is no accepted ACP session", "Open one with `agentctl session new` first."),
    ("prompt_busy", "agent", "a prompt is already running", "Wait for it to finish, or cancel it (the CLI's cancel command)."),
    ("prompt_rejected", "agent", "the agent refused the prompt", "Read the summary; `agentctl stderr` shows the agent's own explanation."),
    ("prompt_timeout", "agent", "the prompt did not finish in time", "Raise the probe's --timeout, or check whether the agent waits for a model it cannot reach."),
    # ---- endpoint tests (reachability from the daemon; never a row's status) ---------------------------------
    ("already_running", "endpoint_test", "a test of this server is already running", "Wait for it to finish."),
    ("bad_timeout", "endpoint_test", "the test's timeout is out of range", "Give a timeout greater than 0 and at most 60 seconds."),
    ("command_not_executable", "endpoint_test", "the server's command is not executable", "Fix the file's permissions or the command in the profile."),
    ("command_not_found", "endpoint_test", "the server's command was not found", "Check the command and PATH of the stdio server in the profile."),
    ("connect_failed", "endpoint_test", "could not connect to the server", "Check that the server runs and listens at the configured host and port."),
    ("connection_closed", "endpoint_test", "the server closed the connection", "The server ended the exchange early: check its own log."),
    ("dns_failed", "endpoint_test", "the server's host name did not resolve", "Check the host name in the server's URL."),
    ("endpoint_not_listening", "endpoint_test", "the built-in MCP endpoint is not listening yet", "Wait until the daemon is ready (`/readyz` answers 200)."),
    ("forbidden", "endpoint_test", "the server refused the request (HTTP 403)", "Check the credentials or headers the profile gives this server."),
    ("http_error", "endpoint_test", "the server answered with an HTTP error", "The summary has the status; check the URL and the server's log."),
    ("method_not_allowed", "endpoint_test", "the server does not accept this HTTP method (HTTP 405)", "The URL may not be an MCP endpoint: check its path."),
    ("not_found", "endpoint_test", "the server has no MCP endpoint at this URL (HTTP 404)", "Check the path of the server's URL (often /mcp or /sse)."),
    ("process_exited", "endpoint_test", "the server process exited before answering", "Run the command by hand to see why it stops; check its arguments and environment."),
    ("spawn_failed", "endpoint_test", "the server's command could not start", "The summary has the system's reason; check the command and working directory."),
    ("test_error", "endpoint_test", "the test could not run", "The summary names the failure; the daemon's log has details."),
    ("timeout", "endpoint_test", "the server did not answer in time", "Check that the server is up and not overloaded, or give the test a longer --timeout."),
    ("tls_error", "endpoint_test", "the TLS handshake with the server failed", "Check the server's certificate and that the URL's scheme matches the server."),
    ("transport_error", "endpoint_test", "the connection to the server failed", "The summary names the failure; check the network path to the server."),
    ("unauthorized", "endpoint_test", "the server wants credentials (HTTP 401)", "Give the server its token or headers in the profile."),
    ("unknown_server", "endpoint_test", "no stored server has this name", "Use a name from the current configuration (`agentctl status` lists them)."),
    # ---- upstream link (status `last_error`) and upstream protocol error frames ------------------------------
    ("closed_by_upstream", "upstream", "the upstream closed the connection", "The daemon reconnects by itself; check the hub's log if it keeps happening."),
    ("connection_lost", "upstream", "the connection to the upstream was lost", "The daemon reconnects by itself and resends a snapshot; check the hub."),
    ("contract_mismatch", "upstream", "the two sides speak different report contract versions", "Run daemon and hub from the same agentctl release."),
    ("duplicate_hello", "upstream", "a second hello arrived on one connection", "A client bug: the connection is closed; report it."),
    ("expected_hello", "upstream", "the first frame of the connection was not hello", "A client bug or a foreign program on the socket: check what connects to it."),
    ("forbidden_peer", "upstream", "the peer runs as another user", "Run the daemon and the hub as the same user (or the hub as root)."),
    ("frame_too_large", "upstream", "a frame exceeded the size limit", "A bug in the sender; the connection is closed and the next snapshot repairs the state."),
    ("identity_mismatch", "upstream", "a frame named another identity than the connection's hello", "A client bug: one connection carries one execution; report it."),
    ("idle_timeout", "upstream", "nothing was received for three heartbeat intervals", "The peer is stalled or gone; the daemon reconnects by itself."),
    ("internal", "upstream", "the other side failed unexpectedly", "Its log has the details; the daemon reconnects and resends a snapshot."),
    ("malformed_frame", "upstream", "a frame could not be read", "The sender is not speaking this protocol version; run both sides from one release."),
    ("not_supported", "upstream", "the request is not supported by this side", "Use a daemon and hub of the same release."),
    ("reconnect", "upstream", "the upstream asks this daemon to connect again (the instance that superseded it is gone)", "Nothing: the daemon reconnects by itself and becomes current again with a fresh snapshot."),
    ("slow_upstream", "upstream", "the upstream stopped reading", "The daemon dropped the connection to protect the agent; it reconnects with a snapshot."),
    ("snapshot_required", "upstream", "evidence arrived before the connection's first snapshot", "A client bug: the hub closes the connection; report it."),
    ("stale_execution", "upstream", "a newer execution of this session is current upstream", "This daemon's evidence is no longer accepted; the newer execution is the one to look at."),
    ("stale_instance", "upstream", "a newer daemon instance of this execution is current upstream", "Stop the duplicate daemon of this execution; this one's evidence is rejected meanwhile."),
    ("truncated_frame", "upstream", "the stream ended inside a frame", "The peer stopped mid-write (crashed or killed); the daemon reconnects."),
    ("unavailable", "upstream", "the request cannot be answered now", "Try again when the daemon has an agent and is connected."),
    ("unreachable", "upstream", "the upstream socket could not be reached", "Check that the hub runs and that [upstream] socket names its socket; evidence is buffered meanwhile."),
    ("unsupported_version", "upstream", "a frame of another protocol version arrived", "Run daemon and hub from the same agentctl release."),
    # ---- refusals of the control API and of the hub page's API (the reason_code of an error answer) -----------
    ("bad_message", "control", "a terminal viewer sent a message that is not one of the terminal route's", "Attach with the `attach` command of the same agentctl release as the daemon; the viewer stays attached."),
    ("bad_request_body", "control", "the request body could not be used: not JSON, or a field it does not take", "Send only the fields the route documents; the message names the field msgspec refused."),
    ("bad_token", "control", "the hub page's token is missing or wrong", "Open the page at the address the hub printed when it started (with its #token=), or read the token from the hub's --token-file."),
    ("body_too_large", "control", "the request body is over the route's size limit", "Send a smaller body (a prompt is at most 256 KiB)."),
    ("catalog_not_loaded", "control", "the agent has not listed the built-in server's tools in this attempt yet", "Wait until the row is active (`agentctl status`), then ask again."),
    ("daemon_stopping", "control", "the daemon is shutting down and takes no new work", "Start a new execution if the work must go on."),
    ("input_stalled", "control", "the agent read none of its waiting keys for 15 s: a terminal viewer's further keys were refused, and counted", "Check that the agent is alive (`agentctl status`) and type again once it reads; `agentctl attach` said how many bytes did not reach it."),
    ("no_acp_agent", "control", "the request needs an ACP agent and this daemon has none (MCP only, or a passthrough CLI)", "Configure an [agent] with protocol = \"acp\" to open sessions, prompt or cancel."),
    ("no_attempt", "control", "there is no attachment attempt yet", "Open one with `agentctl session new` first."),
    ("no_snapshot", "control", "the hub has no snapshot from this session's current execution yet", "Wait for the daemon to connect to the hub; it sends a snapshot at once."),
    ("no_terminal", "control", "the agent does not run on a terminal", "Only a passthrough agent with [agent] terminal = true can be attached to."),
    ("output_skipped", "control", "a terminal viewer fell behind: output it was not sent yet was skipped", "Nothing: it continues from the screen's recent tail; a full-screen program redraws on a resize."),
    ("read_only", "control", "another terminal viewer holds the keyboard: keys and resizes from this one are refused (the refused bytes counted)", "Attach with --take to take the keyboard, or wait until the holder leaves."),
    ("request_refused", "control", "the request was turned down (the HTTP status says how)", "Read the message beside the code; the daemon's log has details."),
    ("terminal_closed", "control", "the agent's terminal is closed (the agent is not running)", "Start it again (`agentctl session new` restarts a passthrough CLI), then attach."),
    ("third_party_server", "control", "the name is a third-party server's: agentctl has no tool catalog for it", "Third-party servers connect directly to the agent; `agentctl tools` lists the built-in server's tools only."),
    ("token_in_query", "control", "a request carried a token in its URL query", "Open the page with #token=… in the fragment, or send the token as an Authorization: Bearer header."),
    ("too_many_streams", "control", "too many update streams of the hub page are open", "Close page tabs you no longer use."),
    ("too_many_viewers", "control", "the agent's terminal has as many viewers as it takes", "Detach a viewer you no longer use."),
    ("unexpected_answer", "control", "the answer could not be read as this agentctl's contract", "Run the CLI from the same agentctl release as the daemon."),
    ("unknown_profile", "control", "no tool profile has this name", "Use task, task-title, config or external."),
    ("unknown_route", "control", "no such route in this API", "Check the route and the agentctl version; the control API answers only on the control socket."),
    ("unknown_session", "control", "the hub has no session of this id", "Take a session id from the hub's status (the page's list, or its status command)."),
    ("unknown_tool", "control", "no tool of this name in the built-in server's catalog", "`agentctl tools` lists the names; a catalog past its bound keeps the first 128 by name."),
    ("websocket_required", "control", "the terminal route is a WebSocket", "Use agentctl's `attach` command, or a WebSocket client over the control socket."),
    ("wrong_host", "control", "the hub page answers only to a loopback host name", "Open the page at 127.0.0.1, [::1] or localhost, with the port it listens on."),
    ("wrong_method", "control", "the route does not take this HTTP method", "Use the method the route documents (GET to read, POST to act)."),
    # ---- tool catalog ------------------------------------------------------------------------------------------
    ("encoding_unavailable", "tools", "the o200k_base encoding could not be loaded, so there are no token estimates", "The copy shipped in the package is missing or damaged (reinstall agentctl), or $AGENTCTL_O200K_PATH names a file that is not o200k_base (unset it); nothing else is affected."),
    ("estimator_loading", "tools", "the token estimates are still being computed", "List the tools again in a moment."),
    ("estimator_failed", "tools", "the token-estimate helper process failed (out of time or memory, or it could not start), so there are no token estimates", "Nothing else is affected; the daemon's log says why. The daemon must be able to start one short-lived process of its own with ~100 MB of memory (mind cgroup memory and process limits); a daemon started again tries again."),
    # ---- the report itself ----------------------------------------------------------------------------------
    ("invalid_reason_code", "report", "a reason code that was not a stable code was replaced", "A bug in the emitter; the summary still says what happened. Please report it."),
    ("report_write_failed", "report", "the report could not be written to the state directory (the errno is in the check detail); the live report is whole and writes are retried", "Free space in the state directory, or make it writable again; the next write catches up."),
))

REASONS: dict[str, Reason] = {reason.code: reason for reason in TABLE}
_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")
assert len(REASONS) == len(TABLE), "a reason code is listed twice"
assert all(_CODE.fullmatch(code) for code in REASONS), "reason codes are lower_snake_case"


def code(name: str) -> str:
    """A registered code, for emitters that name it as a constant (an unregistered one fails at import)."""
    if name not in REASONS:
        raise KeyError(f"reason code {name!r} is not in agentctl.evidence.reasons.TABLE")
    return name


def meaning(reason: str | None) -> str:
    """The plain-language meaning of a code; a code this version does not know reads as its words."""
    if not reason:
        return "no reason recorded"
    found = REASONS.get(reason)
    return found.meaning if found is not None else reason.replace("_", " ")


WHERE_TITLES: dict[str, str] = {
    "row": "On a server row (failed, filtered, unavailable)",
    "session": "Session errors (report level: no row turns red)",
    "agent": "Answers about the agent (session, prompt and cancel commands, readiness)",
    "endpoint_test": "Endpoint tests (reachability from the daemon, never a row's status)",
    "upstream": "The upstream link (`upstream` in status) and upstream error frames",
    "control": "Refusals of the control API and of the hub page (the `reason_code` of an error answer)",
    "tools": "The tool catalog",
    "report": "The report itself",
}


def markdown_table() -> str:
    """The docs table: one section per surface, every code with its meaning and what to do."""
    lines: list[str] = []
    for where, title in WHERE_TITLES.items():
        rows = sorted((r for r in TABLE if r.where == where), key=lambda r: r.code)
        if not rows:
            continue
        lines += [f"#### {title}", "", "| code | what it means | what to do |", "| --- | --- | --- |"]
        lines += [f"| `{r.code}` | {r.meaning} | {r.action} |" for r in rows]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


BEGIN = "<!-- reason-codes:begin (generated by `python -m agentctl.evidence.reasons --doc`) -->"
END = "<!-- reason-codes:end -->"


if __name__ == "__main__":  # `python -m agentctl.evidence.reasons [--doc PATH]`: print the table, or update the doc
    from agentctl.doc_blocks import doc_main

    doc_main(markdown_table, BEGIN, END)
