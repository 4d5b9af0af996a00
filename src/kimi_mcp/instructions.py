"""What kimi-mcp tells an MCP client it is for (the server's ``instructions``), also the description of
``kimi-mcp --help``: plain text, importing nothing."""

INSTRUCTIONS = (
    "kimi-mcp delegates work to Kimi (Moonshot AI's coding agent CLI). Write tools (kimi_code_task, "
    "kimi_prompt, kimi_refactor, kimi_debug) let Kimi change files in the workspace and return every file it "
    "created, modified or deleted, with contents. Read-only tools (kimi_analyze_code, kimi_verify, "
    "kimi_consult, kimi_review: a git range such as main...feature) cannot change anything and can run in "
    "parallel; dry_run=true on any Kimi tool shows what a call would send, starting nothing. Give "
    "self-contained instructions. The "
    "workspace is work_dir, else the client's root, else KIMI_MCP_WORKSPACE, else the server's directory. "
    "Every call is a job: with wait_s it returns status 'running' and a job_id when the turn takes longer, "
    "and kimi_job(job_id) waits for the result; kimi_continue(session_id, message) sends a follow-up in the "
    "same Kimi conversation; kimi_jobs lists recent jobs. With isolation='worktree' a write tool runs Kimi on "
    "an isolated copy of the git tree and returns a diff: kimi_apply(job_id) lands it, kimi_discard drops it. "
    "Clients that support MCP tasks get each Kimi call as a background task (its task id is the job_id)."
)
