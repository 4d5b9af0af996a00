"""The model per call in the drivers: what ``-m`` gets, which models a Kimi offers (its config file, or the
one model set in the environment), and how a requested name becomes one of Kimi's aliases."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_mcp.drivers import KimiInstall, make_driver
from kimi_mcp.errors import BadInput

CONFIG = """default_model = "{one}"
[providers.fake]
type = "kimi"
[models."{one}"]
provider = "fake"
model = "kimi-k2-one"
[models."{two}"]
provider = "fake"
model = "kimi-k2-two"
[models."other/kimi-k2-two"]
provider = "other"
model = "kimi-k2-two"
"""
DIALECTS = {"legacy": (".kimi", "one", "two"), "kimi-code": (".kimi-code", "fake/one", "fake/two")}


@pytest.fixture(params=sorted(DIALECTS))
def setup(request: pytest.FixtureRequest, tmp_path: Path):
    folder, one, two = DIALECTS[request.param]
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "config.toml").write_text(CONFIG.format(one=one, two=two))
    driver = make_driver(
        KimiInstall("/bin/kimi", "1.50.0" if request.param == "legacy" else "2.1.0", request.param)
    )
    return driver, {"HOME": str(tmp_path)}, one, two


def test_argv_passes_the_model_with_dash_m(setup) -> None:
    driver, _env, one, _two = setup
    assert driver.argv(model=one) == ["/bin/kimi", "-m", one]
    assert driver.argv(read_only=True, model=one) == ["/bin/kimi", "--plan", "-m", one]
    assert driver.resume_argv("s-1", model=one) == ["/bin/kimi", "-m", one, "-S", "s-1"]
    assert driver.argv() == ["/bin/kimi"]


def test_models_come_from_the_config_file(setup) -> None:
    driver, env, one, two = setup
    assert driver.models(env) == {one: "kimi-k2-one", two: "kimi-k2-two", "other/kimi-k2-two": "kimi-k2-two"}
    assert driver.models({"HOME": "/nonexistent"}) == {}


def test_a_model_is_named_by_alias_by_model_name_or_by_the_alias_tail(setup) -> None:
    driver, env, one, two = setup
    assert driver.model_flag(one, env) == one
    assert driver.model_flag("kimi-k2-one", env) == one
    assert driver.model_flag("one", env) == one
    assert driver.model_flag("other/kimi-k2-two", env) == "other/kimi-k2-two"


def test_an_unknown_or_ambiguous_model_is_bad_input_listing_the_models(setup) -> None:
    driver, env, one, two = setup
    with pytest.raises(BadInput) as unknown:
        driver.model_flag("kimi-k9", env, "KIMI_MCP_MODEL")
    assert unknown.value.message.startswith(
        "KIMI_MCP_MODEL 'kimi-k9' is not one of the models this Kimi offers"
    )
    assert f"{one} (kimi-k2-one)" in unknown.value.message
    assert unknown.value.details["available"] == sorted([one, two, "other/kimi-k2-two"])
    assert unknown.value.details["configured_in"].endswith("config.toml")
    with pytest.raises(BadInput, match="'kimi-k2-two' is ambiguous"):
        driver.model_flag("kimi-k2-two", env)  # two aliases have that model name


def test_a_kimi_without_models_takes_any_name_for_its_login(setup) -> None:
    driver, _env, _one, _two = setup
    assert driver.model_flag("kimi-k2-whatever", {"HOME": "/nonexistent"}) is None


def test_the_environments_model_is_the_only_one_and_needs_no_flag(setup) -> None:
    driver, env, _one, _two = setup
    env = dict(env, KIMI_MODEL_NAME="kimi-k2-env")
    assert driver.models(env) == {"kimi-k2-env": "kimi-k2-env"}
    assert driver.model_flag("kimi-k2-env", env) is None  # both dialects would ignore -m
    with pytest.raises(BadInput) as other:
        driver.model_flag("kimi-k2-one", env)
    assert other.value.details["configured_in"] == "KIMI_MODEL_NAME in the server's environment"


def test_the_default_alias_is_what_kimi_runs_without_dash_m(setup, tmp_path: Path) -> None:
    driver, env, one, _two = setup
    assert driver.default_alias(env) == one  # default_model in its config file
    assert driver.default_alias({**env, "KIMI_MODEL_NAME": "k2-env"}) == "k2-env"  # the environment wins
    assert driver.default_alias({"HOME": str(tmp_path / "nobody")}) is None  # no config: not logged in yet
