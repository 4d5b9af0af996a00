"""The MCP adapter: what turns a tool call into jobs and their results into MCP replies, beneath the tools.

- :mod:`.pipeline` — one call for every Kimi tool (check, workspace, context, prompt, the job's spec,
  submit, wait, reply) and the server's :class:`~.pipeline.Backend` (settings, environment, job manager);
- :mod:`.tasks` — the MCP tasks extension (a call that runs as a background task whose id is its job's);
- :mod:`.questions` — Kimi's questions and approvals asked of the client (elicitation) and its answers;
- :mod:`.client` — the client's roots, its log notifications, waiting for a job while relaying progress,
  results as structured content;
- :mod:`.budget` — a result fitted into ``KIMI_MCP_MAX_RESULT_CHARS``; :mod:`.resources` — what a result
  cut, whole, as ``kimi-mcp://jobs/...`` resources;
- :mod:`.isolation` — the checks of ``isolation``/``attempts``/``verify_command``, ranking attempts, pruning
  the copies of interrupted jobs.

The tools (:mod:`kimi_mcp.tools`) are the functions the client sees; they build on this package.
"""
