"""The test-only redirects to the fake API: the legacy sitecustomize hook and the TLS-intercepting proxy."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "helpers"))

from fake_moonshot import FakeMoonshot  # noqa: E402
from tls_proxy import TestCA, TLSProxy, proxy_env  # noqa: E402

FAKEPLAT = Path(__file__).parents[1] / "helpers" / "fakeplat"
ORIGINAL_URLS = {
    "moonshot-cn": "https://api.moonshot.cn/v1",
    "moonshot-ai": "https://api.moonshot.ai/v1",
}

PLATFORMS_DUMP = r"""
import asyncio, json, sys
import kimi_cli.auth.platforms as p
out = {
    "platforms": [x._asdict() for x in p.PLATFORMS],
    "by_id": {k: v.base_url for k, v in p._PLATFORM_BY_ID.items()},
    "by_name": {k: v.base_url for k, v in p._PLATFORM_BY_NAME.items()},
    "lookup": p.get_platform_by_id("moonshot-cn").base_url,
    "sitecustomize": getattr(sys.modules.get("sitecustomize"), "__file__", None),
}
if len(sys.argv) > 1:  # also verify a key the way /login does
    models = asyncio.run(p.list_models(p.get_platform_by_id(sys.argv[1]), "sk-redirect"))
    out["models"] = [m.id for m in models]
print(json.dumps(out))
"""


def _clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "KIMI_", "MOONSHOT_"))
        and k.lower() not in ("https_proxy", "http_proxy")
    } | {"NO_PROXY": "127.0.0.1,localhost"}


# ---------------------------------------------------------------------------------------- sitecustomize


@pytest.fixture(scope="module")
def legacy_python(legacy_kimi: Path) -> Path:
    """The interpreter of the kimi-cli 1.50 venv (`uv tool install` layout, see kimi_install)."""
    python = legacy_kimi.parents[1] / "tools" / "kimi-cli" / "bin" / "python"
    assert python.exists(), python
    return python


def _dump(python: Path, env: dict[str, str], *args: str) -> dict:
    proc = subprocess.run(
        [str(python), "-c", PLATFORMS_DUMP, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# The two checks of the hook inside kimi-cli 1.50's own Python, and Node's through the proxy, run the real Kimi's
# runtime the suite installs: they are end-to-end checks of the route every e2e test's Kimi takes to the fake API.
@pytest.mark.e2e
def test_sitecustomize_rewrites_only_the_moonshot_platforms(legacy_python: Path, fake: FakeMoonshot):
    plain = _dump(legacy_python, _clean_env())
    hooked_env = _clean_env() | {"PYTHONPATH": str(FAKEPLAT), "KIMI_FAKE_PLATFORM_BASE_URL": fake.base_url}
    hooked = _dump(legacy_python, hooked_env, "moonshot-ai")

    assert hooked["sitecustomize"] == str(FAKEPLAT / "sitecustomize.py")
    assert [p["id"] for p in plain["platforms"]] == [p["id"] for p in hooked["platforms"]]
    for before, after in zip(plain["platforms"], hooked["platforms"], strict=True):
        if before["id"] in ORIGINAL_URLS:
            assert before["base_url"] == ORIGINAL_URLS[before["id"]]
            assert after == before | {"base_url": fake.base_url}
        else:
            assert after == before  # Kimi Code (OAuth) untouched
    for table in ("by_id", "by_name"):
        changed = {k: v for k, v in hooked[table].items() if v != plain[table][k]}
        assert len(changed) == 2 and set(changed.values()) == {fake.base_url}
    assert hooked["lookup"] == fake.base_url
    # the /login key check (GET {base_url}/models) really lands on the fake
    assert hooked["models"] == ["kimi-k2-fake"]
    assert [(r["method"], r["path"], r["headers"]["authorization"]) for r in fake.requests] == [
        ("GET", "/v1/models", "Bearer sk-redirect")
    ]


@pytest.mark.e2e  # the real Kimi's runtime, see above
def test_sitecustomize_is_inert_without_the_env_var(legacy_python: Path):
    plain = _dump(legacy_python, _clean_env())
    on_path = _dump(legacy_python, _clean_env() | {"PYTHONPATH": str(FAKEPLAT)})
    assert on_path["sitecustomize"] == str(FAKEPLAT / "sitecustomize.py")
    assert {k: v for k, v in on_path.items() if k != "sitecustomize"} == {
        k: v for k, v in plain.items() if k != "sitecustomize"
    }
    assert {p["id"]: p["base_url"] for p in on_path["platforms"]}.items() >= ORIGINAL_URLS.items()


def test_sitecustomize_harmless_elsewhere_and_chains(tmp_path: Path):
    """In a non-kimi interpreter (like the kimi-mcp server) it only adds a dormant finder, and the
    sitecustomize it shadows still runs."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED_SITECUSTOMIZE'] = 'ran'\n")
    code = (
        "import json, os, sys, sitecustomize as s\n"
        "import email.parser, asyncio\n"  # ordinary imports still work
        "print(json.dumps({'file': s.__file__, 'chained': os.environ.get('CHAINED_SITECUSTOMIZE'),"
        " 'finders': [type(f).__name__ for f in sys.meta_path],"
        " 'kimi': any(m.startswith('kimi_cli') for m in sys.modules)}))"
    )
    results = {}
    for name, extra in {
        "on": {"KIMI_FAKE_PLATFORM_BASE_URL": "http://127.0.0.1:9/v1"},
        "off": {},
    }.items():
        env = _clean_env() | {"PYTHONPATH": os.pathsep.join([str(FAKEPLAT), str(other)])} | extra
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        results[name] = json.loads(proc.stdout)
    for result in results.values():
        assert result["file"] == str(FAKEPLAT / "sitecustomize.py")
        assert result["chained"] == "ran"
        assert result["kimi"] is False
    assert "_PlatformsFinder" in results["on"]["finders"]
    assert "_PlatformsFinder" not in results["off"]["finders"]


# ------------------------------------------------------------------------------------------- TLS proxy


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("tls"))


def _opener(proxy: TLSProxy, ca: TestCA) -> urllib.request.OpenerDirector:
    ctx = ca.client_context()
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT  # as strict as Python 3.13's default
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({"https": proxy.url}), urllib.request.HTTPSHandler(context=ctx)
    )


def test_test_ca_is_generated_once_and_is_well_formed(ca: TestCA):
    from cryptography import x509

    again = TestCA(ca.directory)
    assert again.ca_pem.read_bytes() == ca.ca_pem.read_bytes()
    assert again.leaf_pem.read_bytes() == ca.leaf_pem.read_bytes()
    root = x509.load_pem_x509_certificate(ca.ca_pem.read_bytes())
    leaf = x509.load_pem_x509_certificate(ca.leaf_pem.read_bytes())
    assert root.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert root.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign is True
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"api.moonshot.cn", "api.moonshot.ai", "localhost"} <= set(sans.get_values_for_type(x509.DNSName))
    leaf.verify_directly_issued_by(root)
    assert oct(ca.ca_key.stat().st_mode & 0o777) == "0o600"


def test_proxy_relays_https_to_the_fake(ca: TestCA, fake: FakeMoonshot):
    with TLSProxy(fake.port, ca) as proxy:
        opener = _opener(proxy, ca)
        request = urllib.request.Request(
            "https://api.moonshot.cn/v1/models", headers={"Authorization": "Bearer sk-proxy"}
        )
        with opener.open(request, timeout=10) as response:
            assert response.status == 200
            assert json.load(response)["data"][0]["id"] == "kimi-k2-fake"
        chat = urllib.request.Request(
            "https://api.moonshot.ai/v1/chat/completions",
            data=json.dumps({"model": "kimi-k2-fake", "stream": True, "messages": []}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with opener.open(chat, timeout=10) as response:
            body = response.read().decode()
        assert "FAKE-OK" in body and body.rstrip().endswith("data: [DONE]")
        assert proxy.connects == ["api.moonshot.cn:443", "api.moonshot.ai:443"]
        assert proxy.errors == []
    seen = [(r["method"], r["path"], r["headers"]["host"]) for r in fake.requests]
    assert seen == [
        ("GET", "/v1/models", "api.moonshot.cn"),
        ("POST", "/v1/chat/completions", "api.moonshot.ai"),
    ]
    assert fake.requests[0]["headers"]["authorization"] == "Bearer sk-proxy"


def test_proxy_refuses_other_hosts_and_plain_requests(ca: TestCA, fake: FakeMoonshot):
    with TLSProxy(fake.port, ca) as proxy:
        with pytest.raises(urllib.error.URLError, match="403"):
            _opener(proxy, ca).open("https://code.kimi.com/x", timeout=10)
        plain = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy.url}))
        with pytest.raises(urllib.error.HTTPError) as info:
            plain.open("http://api.moonshot.cn/v1/models", timeout=10)
        assert info.value.code == 501
        info.value.close()
        assert proxy.connects == proxy.refused == ["code.kimi.com:443"]
    assert fake.requests == []


def test_proxy_handles_many_connections_and_stops_cleanly(ca: TestCA, fake: FakeMoonshot):
    proxy = TLSProxy(fake.port, ca).start()
    opener = _opener(proxy, ca)
    failures: list[BaseException] = []

    def fetch() -> None:
        try:
            with opener.open("https://api.moonshot.ai/v1/models", timeout=30) as response:
                json.load(response)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            failures.append(exc)

    workers = [threading.Thread(target=fetch) for _ in range(40)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert failures == []
    assert len(proxy.connects) == 40 and proxy.errors == []

    # an idle tunnel (handshake done, nothing sent) must not keep stop() waiting or leak its thread
    raw = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    raw.sendall(b"CONNECT api.moonshot.cn:443 HTTP/1.1\r\nHost: api.moonshot.cn:443\r\n\r\n")
    assert raw.recv(1024).startswith(b"HTTP/1.1 200")
    tls = ca.client_context().wrap_socket(raw, server_hostname="api.moonshot.cn")
    assert proxy.active_connections == 1
    port = proxy.port
    mine = list(proxy._threads)  # this proxy's connection threads (other tests may run proxies too)
    assert mine
    proxy.stop()
    assert proxy.active_connections == 0
    assert not any(thread.is_alive() for thread in mine)
    assert tls.recv(1) == b""  # the proxy closed its end
    tls.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


@pytest.mark.e2e  # the real Kimi's runtime, see above
def test_node_reaches_the_fake_through_the_proxy(
    kimi_code: tuple[Path, Path], ca: TestCA, fake: FakeMoonshot
):
    """The real client: Node 22's fetch with NODE_USE_ENV_PROXY and NODE_EXTRA_CA_CERTS."""
    _binary, node_bin = kimi_code
    script = (
        "const r = await fetch('https://api.moonshot.cn/v1/models', {headers: {Authorization: 'Bearer sk-node'}});"
        "console.log(JSON.stringify({status: r.status, body: await r.json()}));"
    )
    with TLSProxy(fake.port, ca) as proxy:
        env = _clean_env() | proxy_env(proxy, ca)
        proc = subprocess.run(
            [str(node_bin / "node"), "--input-type=module", "-e", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert "UNDICI-EHPA" not in proc.stderr  # proxy_env(quiet=True) silences Node's warning
        result = json.loads(proc.stdout)
        assert result["status"] == 200 and result["body"]["data"][0]["id"] == "kimi-k2-fake"
        assert proxy.connects == ["api.moonshot.cn:443"]
    assert fake.requests[0]["headers"]["authorization"] == "Bearer sk-node"
