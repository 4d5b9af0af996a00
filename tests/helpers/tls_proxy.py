"""A local HTTPS-intercepting proxy for tests (stdlib + ``cryptography``).

Kimi Code 2.1 hard-codes the Kimi Platform base URLs (``https://api.moonshot.cn/v1`` and
``https://api.moonshot.ai/v1``) used by ``/login`` -> "Kimi Platform (API key ...)". To run that flow
offline, Node is told to use an HTTP proxy (``NODE_USE_ENV_PROXY=1``, Node >= 22.21 / 24.5) and to trust a
test CA (``NODE_EXTRA_CA_CERTS``); this proxy answers ``CONNECT api.moonshot.cn:443``, terminates TLS with
a leaf certificate signed by that CA, and relays the plaintext to the suite's plain-HTTP fake API on
``127.0.0.1:<upstream_port>``.

    ca = TestCA(tmp_dir)
    with FakeMoonshot() as fake, TLSProxy(fake.port, ca) as proxy:
        env.update(proxy_env(proxy, ca))
        ...  # spawn node / kimi with env
        assert "api.moonshot.cn:443" in proxy.connects

Once a proxy is in the environment, every HTTPS request of the child goes through it, so nothing leaves the
machine: Kimi Code 2.1 also CONNECTs to ``code.kimi.com:443`` (its CDN, 3x at startup) - those land in
``proxy.refused`` with a 403 and Kimi carries on. ``127.0.0.1``/``localhost`` bypass the proxy (NO_PROXY),
so ``KIMI_CODE_BASE_URL``/``KIMI_MODEL_BASE_URL`` pointing at the fake keep working alongside.

Run directly for a manual session: ``python tests/helpers/tls_proxy.py --upstream-port 8765 --dir /tmp/tls``.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import os
import selectors
import socket
import ssl
import tempfile
import threading
from pathlib import Path

DEFAULT_HOSTS = ("api.moonshot.cn", "api.moonshot.ai", "localhost")
_HEAD_LIMIT = 65536
_IO_TIMEOUT = 60.0  # a blocked sendall()/handshake gives up after this
_CHUNK = 65536


# -- certificates ------------------------------------------------------------------------------------------
class TestCA:
    """A test root CA and one leaf certificate for ``hosts`` (plus IP 127.0.0.1), kept in ``directory``.

    Files: ``ca.pem`` (trust this), ``ca.key``, ``leaf.pem`` (leaf + CA chain), ``leaf.key``. They are
    generated once per directory (under a file lock, so parallel test processes agree) and reused when
    present. EC P-256 / SHA-256, valid from yesterday for 30 days; extensions satisfy Node 22 (OpenSSL 3)
    and Python 3.13's ``VERIFY_X509_STRICT``.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str | os.PathLike[str], hosts: tuple[str, ...] = DEFAULT_HOSTS) -> None:
        self.directory = Path(directory)
        self.hosts = tuple(hosts)
        self.ca_pem = self.directory / "ca.pem"
        self.ca_key = self.directory / "ca.key"
        self.leaf_pem = self.directory / "leaf.pem"
        self.leaf_key = self.directory / "leaf.key"
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not all(p.is_file() for p in (self.ca_pem, self.ca_key, self.leaf_pem, self.leaf_key)):
                self._generate()

    def _generate(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = datetime.datetime.now(datetime.UTC)
        not_before, not_after = now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kimi-mcp tests"),
                x509.NameAttribute(NameOID.COMMON_NAME, "kimi-mcp test root CA"),
            ]
        )
        ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(ca_ski, critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )

        leaf_key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = [x509.DNSName(h) for h in self.hosts]
        sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
        leaf_cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.hosts[0])]))
            .issuer_name(ca_name)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(leaf_key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )

        def key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
            return key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )

        ca_bytes = ca_cert.public_bytes(serialization.Encoding.PEM)
        leaf_bytes = leaf_cert.public_bytes(serialization.Encoding.PEM)
        # Keys first, certificates last: a half-written set is regenerated (is_file check above).
        _atomic_write(self.ca_key, key_bytes(ca_key), 0o600)
        _atomic_write(self.leaf_key, key_bytes(leaf_key), 0o600)
        _atomic_write(self.leaf_pem, leaf_bytes + ca_bytes)
        _atomic_write(self.ca_pem, ca_bytes)

    def server_context(self) -> ssl.SSLContext:
        """TLS server context presenting the leaf certificate (HTTP/1.1 only)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.leaf_pem, self.leaf_key)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """A default (verifying) client context that trusts only the test CA."""
        return ssl.create_default_context(cafile=str(self.ca_pem))


def _atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# -- proxy -------------------------------------------------------------------------------------------------
class TLSProxy:
    """Thread-based CONNECT proxy on 127.0.0.1 that terminates TLS and relays to a plain-HTTP upstream.

    Every ``CONNECT host:port`` target is appended to ``connects`` (e.g. ``"api.moonshot.cn:443"``). Hosts
    the leaf certificate does not cover are refused with 403 (``allow_any_host=True`` relays them too);
    plain proxy requests (``GET http://...``) get 501. A tunnel lives until either side closes it (a client
    half-close is forwarded and the upstream's answer still delivered), ``idle_timeout`` or ``stop()``.
    Per-connection failures (TLS alerts from a client that rejects the certificate, resets) are collected
    in ``errors``.
    """

    def __init__(
        self,
        upstream_port: int,
        ca: TestCA,
        port: int = 0,
        *,
        allow_any_host: bool = False,
        idle_timeout: float | None = None,
    ) -> None:
        self.upstream_port = upstream_port
        self.idle_timeout = idle_timeout  # None: a quiet tunnel stays open until either side closes
        self.ca = ca
        self.allow_any_host = allow_any_host
        self.connects: list[str] = []
        self.refused: list[str] = []
        self.errors: list[str] = []
        self._ctx = ca.server_context()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", port), backlog=128)
        self._wake_r, self._wake_w = socket.socketpair()
        self._accept_thread: threading.Thread | None = None
        self._threads: set[threading.Thread] = set()  # connections being served
        self._started: list[threading.Thread] = []  # every connection thread, for stop() to join
        self._sockets: set[socket.socket] = set()

    # -- lifecycle -----------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._listener.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> TLSProxy:
        if self._accept_thread is None:
            self._accept_thread = threading.Thread(target=self._accept_loop, name="tls-proxy", daemon=True)
            self._accept_thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")  # never read: wakes every selector in every thread
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        with self._lock:
            # every thread, not just those still serving: one that has left _threads may still be exiting
            sockets, threads = list(self._sockets), list(self._started)
        for sock in sockets:  # unblocks threads stuck in sendall()/recv()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(timeout)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    def __enter__(self) -> TLSProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def active_connections(self) -> int:
        with self._lock:
            return len(self._threads)

    # -- accept ---------------------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self._listener, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in sel.select():
                    if key.fileobj is not self._listener or self._stopping.is_set():
                        continue
                    try:
                        client, _addr = self._listener.accept()
                    except OSError:
                        continue
                    thread = threading.Thread(
                        target=self._serve, args=(client,), name="tls-proxy-conn", daemon=True
                    )
                    with self._lock:
                        self._threads.add(thread)
                        self._started.append(thread)
                        self._sockets.add(client)
                    thread.start()

    # -- one connection -------------------------------------------------------------------------------------
    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            client.settimeout(_IO_TIMEOUT)
            head, rest = self._read_head(client)
            if head is None:
                return
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split()
            if len(parts) != 3 or parts[0].upper() != "CONNECT":
                client.sendall(
                    b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
                return
            target = parts[1]
            host = target.rsplit(":", 1)[0].strip("[]").lower()
            with self._lock:
                self.connects.append(target)
            if not self.allow_any_host and host not in self.ca.hosts and host != "127.0.0.1":
                with self._lock:
                    self.refused.append(target)
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=_IO_TIMEOUT)
            except OSError:  # like a real proxy: the tunnel cannot be opened
                client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                raise
            with self._lock:
                self._sockets.add(upstream)
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            self._relay(client, upstream, rest, target)
        except (OSError, ssl.SSLError, ValueError) as exc:
            if not self._stopping.is_set():
                with self._lock:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())
                for sock in (client, upstream):
                    if sock is not None:
                        self._sockets.discard(sock)
            for sock in (client, upstream):
                if sock is not None:
                    sock.close()

    def _wait_readable(
        self, *socks: socket.socket, timeout: float | None = _IO_TIMEOUT
    ) -> list[socket.socket]:
        """Block until one of ``socks`` is readable; [] on stop or timeout."""
        with selectors.DefaultSelector() as sel:
            for sock in socks:
                sel.register(sock, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            ready = [key.fileobj for key, _ in sel.select(timeout)]
        if self._stopping.is_set() or self._wake_r in ready:
            return []
        return ready  # type: ignore[return-value]

    def _read_head(self, client: socket.socket) -> tuple[bytes | None, bytes]:
        buf = b""
        while b"\r\n\r\n" not in buf:
            if len(buf) > _HEAD_LIMIT or not self._wait_readable(client):
                return None, b""
            chunk = client.recv(_CHUNK)
            if not chunk:
                return None, b""
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        return head, rest

    def _relay(self, client: socket.socket, upstream: socket.socket, early: bytes, target: str) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self._ctx.wrap_bio(incoming, outgoing, server_side=True)
        if early:
            incoming.write(early)

        def flush() -> None:
            data = outgoing.read()
            if data:
                client.sendall(data)

        # TLS handshake (server side), driven through the memory BIOs.
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError:
                with contextlib.suppress(OSError):
                    flush()  # deliver our alert
                raise
            flush()
            if not self._wait_readable(client):
                return
            data = client.recv(_CHUNK)
            if not data:
                raise ConnectionAbortedError(f"{target}: client closed during the TLS handshake")
            incoming.write(data)
        flush()

        client_open = True

        def from_client(data: bytes | None) -> None:
            nonlocal client_open
            if data is not None:
                if data:
                    incoming.write(data)
                else:
                    incoming.write_eof()
            plain, closed = _drain(tls)
            if plain:
                upstream.sendall(plain)
            flush()  # TLS 1.3 post-handshake replies (key update)
            if closed or data == b"":
                client_open = False  # half-close: let the upstream finish its answer
                with contextlib.suppress(OSError):
                    upstream.shutdown(socket.SHUT_WR)

        from_client(None)  # the request may have arrived together with the client's Finished
        while True:
            watch = [upstream, client] if client_open else [upstream]
            ready = self._wait_readable(*watch, timeout=self.idle_timeout)
            if not ready:
                return
            if client in ready:
                from_client(client.recv(_CHUNK))
            if upstream in ready:
                data = upstream.recv(_CHUNK)
                if not data:  # upstream done: close_notify, then close the client
                    with contextlib.suppress(ssl.SSLError, OSError):
                        tls.unwrap()
                    with contextlib.suppress(OSError):
                        flush()
                    return
                tls.write(data)  # the client may still read after half-closing
                flush()


def _drain(tls: ssl.SSLObject) -> tuple[bytes, bool]:
    """Decrypt everything buffered; returns (plaintext, client sent close_notify/EOF)."""
    chunks: list[bytes] = []
    closed = False
    while True:
        try:
            chunk = tls.read(_CHUNK)
        except ssl.SSLWantReadError:
            break
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            closed = True
            break
        if not chunk:
            closed = True
            break
        chunks.append(chunk)
    return b"".join(chunks), closed


def proxy_env(proxy: TLSProxy, ca: TestCA, *, quiet: bool = True) -> dict[str, str]:
    """Environment for a Node >= 22.21 child (e.g. Kimi Code) to reach ``proxy`` and trust ``ca``.

    Both spellings of the proxy variables are set so a stray lower-case one in the parent environment
    cannot win. ``quiet`` adds ``NODE_OPTIONS=--disable-warning=UNDICI-EHPA``: otherwise Node 22 prints
    "[UNDICI-EHPA] Warning: EnvHttpProxyAgent is experimental ..." on stderr, i.e. on top of the TUI
    (merge by hand if the child needs other ``NODE_OPTIONS``).
    """
    env = {
        "NODE_USE_ENV_PROXY": "1",
        "HTTPS_PROXY": proxy.url,
        "https_proxy": proxy.url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "NODE_EXTRA_CA_CERTS": str(ca.ca_pem),
    }
    if quiet:
        env["NODE_OPTIONS"] = "--disable-warning=UNDICI-EHPA"
    return env


def main() -> None:  # pragma: no cover - manual use
    import argparse
    import time

    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--dir", required=True, help="where ca.pem etc. live (created if missing)")
    args = parser.parse_args()
    ca = TestCA(args.dir)
    with TLSProxy(args.upstream_port, ca, args.port) as proxy:
        for key, value in proxy_env(proxy, ca).items():
            print(f"export {key}={value}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
