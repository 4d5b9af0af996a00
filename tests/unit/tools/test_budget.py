"""The result budget (``adapter.budget``): shared fairly, each cut listed once with its true size, honoured
exactly."""

from __future__ import annotations

from kimi_mcp.adapter.budget import fit_to_budget, result_json
from kimi_mcp.models import Evidence, FixRound, TaskResult, ToolCallTrace, TruncatedItem


def size(result: TaskResult) -> int:
    return len(result_json(result.model_dump(mode="json")))


def big_result() -> TaskResult:
    return TaskResult(
        success=True,
        output="A" * 15_000,
        files_modified=["one.py", "two.py", "small.txt"],
        file_contents={"one.py": "1" * 55_000, "two.py": "2\n" * 27_500, "small.txt": "tiny\n"},
        evidence=Evidence(tools_run=[ToolCallTrace(name="Write", arguments="x" * 2_000, result="ok" * 500)]),
    )


def test_texts_share_the_budget_and_no_file_is_dropped() -> None:
    result = fit_to_budget(big_result(), 40_000)
    assert size(result) <= 40_000
    contents = result.file_contents
    assert set(contents) == {"one.py", "two.py", "small.txt"} and contents["small.txt"] == "tiny\n"
    kept = {path: len(text.split("… [cut")[0]) for path, text in contents.items() if "… [cut" in text}
    assert set(kept) == {"one.py", "two.py"} and kept["one.py"] == kept["two.py"] > 5_000  # one common length
    assert result.output.startswith("A" * kept["one.py"])  # the answer shares the same cut
    assert len(result.evidence.tools_run[0].arguments) == 200  # tool arguments went before any file content
    cuts = {item.path: item for item in result.truncated}
    assert len(cuts) == len(result.truncated)  # each cut once
    assert cuts["one.py"].size_bytes == 55_000 and cuts["two.py"].size_bytes == 55_000
    assert cuts["one.py"].returned_chars == kept["one.py"] and cuts["output"].size_bytes == 15_000


def test_a_file_the_tracker_cut_keeps_one_entry_with_its_true_size() -> None:
    result = big_result()
    result.file_contents["one.py"] = "1" * 20_000
    result.truncated.append(
        TruncatedItem(path="one.py", reason="file_too_large", size_bytes=100_000, returned_chars=20_000)
    )
    result = fit_to_budget(result, 30_000)
    entries = [item for item in result.truncated if item.path == "one.py"]
    assert len(entries) == 1 and entries[0].size_bytes == 100_000
    assert entries[0].returned_chars < 20_000 and entries[0].reason == "result_budget"
    assert size(result) <= 30_000


def test_the_budget_holds_when_the_lists_alone_are_too_long() -> None:
    names = [f"src/generated/module_{i:05d}.py" for i in range(3_000)]
    result = TaskResult(success=True, files_created=names, evidence=Evidence(files_read=names))
    result = fit_to_budget(result, 20_000)
    assert size(result) <= 20_000
    assert result.evidence.files_read == [] and 0 < len(result.files_created) < 3_000
    assert result.files_created == names[: len(result.files_created)]  # the head is kept, in order
    cuts = {item.path for item in result.truncated}
    assert cuts == {"evidence.files_read", "files_created"}


def test_a_result_within_the_budget_is_untouched() -> None:
    result = big_result()
    before = result.model_dump()
    assert fit_to_budget(result, 1_000_000).model_dump() == before
    assert fit_to_budget(result, 0).model_dump() == before  # 0 = no cap


def test_the_resource_uris_of_a_jobs_cuts_count_in_the_budget() -> None:
    result = big_result()
    result.job_id = "job_" + "a" * 16
    result.truncated.append(
        TruncatedItem(path="small.txt", reason="file_too_large", size_bytes=9, returned_chars=5)
    )
    for limit in (40_000, 12_000, 3_000):
        fitted = fit_to_budget(result.model_copy(deep=True), limit)
        assert size(fitted) <= limit
        uris = {item.path: item.uri for item in fitted.truncated}
        assert (
            uris["small.txt"] == "kimi-mcp://jobs/job_aaaaaaaaaaaaaaaa/files/small.txt"
        )  # the tracker's cut too
        assert uris["one.py"].endswith("/files/one.py") and uris["output"].endswith("/output")


def test_the_fix_rounds_output_tails_are_cut_to_their_ends() -> None:
    result = big_result()
    result.rounds = [FixRound(round=n, exit_code=1, output_tail=f"{n}" * 3_990 + "FAILED") for n in range(6)]
    result = fit_to_budget(result, 40_000)
    assert size(result) <= 40_000
    assert [r.output_tail for r in result.rounds] == [f"{n}" * 194 + "FAILED" for n in range(6)]
