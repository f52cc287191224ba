"""How the client checks a pool's server over TLS, as the gpupool CLI does
(src/net/tls.h, docs/security.md#tls).

Four modes, exactly one per connection:

* **pinned** (``ca_fingerprint="sha256:..."``): the pool's own CA is pinned.
  The chain the server presents must contain a certificate with that SHA-256
  fingerprint, and the server's certificate must verify up to it, as the only
  trust anchor, with the serverAuth purpose. The host name is not checked
  (the CA is private to the pool). With the standard library this takes two
  steps: the first connection to a server fetches the chain it presents
  (a handshake with no verification, over which nothing is sent, closed at
  once) and picks the certificate whose fingerprint is the pin; every
  connection then verifies the server with that certificate as its only
  trust anchor (OpenSSL, ``VERIFY_X509_PARTIAL_CHAIN`` as the CLI sets it,
  libssl's serverAuth purpose for a client) and, after the handshake,
  checks again that the chain presented contains the pin. Nothing is sent
  before both checks pass.
* **CA file** (``ca_file=PATH``): the CAs of that PEM bundle, with the URL's
  host name (or IP address) checked against the certificate.
* **system roots** (neither): the system's CAs, with the host name checked.
* **insecure** (``insecure=True``): no check at all. Development only.

Thread-safety: a :class:`TlsPolicy` may be shared by threads; its cache of
pinned certificates is guarded by a lock.
"""
from __future__ import annotations

import hashlib
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional

from .errors import BadRequest, TLSVerificationError, Unavailable

__all__ = ["TlsSettings", "TlsPolicy", "NotConnected", "normalize_fingerprint", "fingerprint_of"]


class NotConnected(Unavailable):
    """The connection was never made: safe to try another server for any method."""


def normalize_fingerprint(text: str) -> str:
    """``"sha256:<64 lowercase hex>"`` from the forms the CLI accepts: with or
    without the ``sha256:`` prefix (any case), 64 hex digits or 32 pairs
    separated by colons. Raises :class:`~gpupool.BadRequest` otherwise."""
    t = text.strip()
    if t[:7].lower() == "sha256:":
        t = t[7:]
    t = t.lower()
    if len(t) == 32 * 3 - 1:
        if any(t[i] != ":" for i in range(2, len(t), 3)):
            t = ""
        else:
            t = t.replace(":", "")
    if len(t) != 64 or any(c not in "0123456789abcdef" for c in t):
        raise BadRequest(f'"{text[:120]}" is not a SHA-256 fingerprint (want sha256:<64 hex digits>)')
    return "sha256:" + t


def fingerprint_of(der: bytes) -> str:
    """The ``sha256:`` fingerprint of a DER certificate."""
    return "sha256:" + hashlib.sha256(der).hexdigest()


@dataclass(frozen=True)
class TlsSettings:
    """How to check a server: at most one of the three fields set; none means
    the system's CAs."""

    ca_fingerprint: str = ""
    ca_file: str = ""
    insecure: bool = False

    def validated(self) -> "TlsSettings":
        """These settings with the fingerprint normalized; raises
        :class:`~gpupool.BadRequest` for combinations the CLI refuses."""
        if self.insecure and (self.ca_fingerprint or self.ca_file):
            raise BadRequest("TLS: insecure cannot be combined with ca_fingerprint or ca_file")
        if self.ca_fingerprint and self.ca_file:
            raise BadRequest("TLS: set ca_fingerprint or ca_file, not both")
        if self.ca_fingerprint:
            return TlsSettings(normalize_fingerprint(self.ca_fingerprint), "", False)
        return self


def _peer_chain(sock: ssl.SSLSocket) -> List[bytes]:
    """The certificates the server presented (leaf first), as DER. Python
    3.13 has SSLSocket.get_unverified_chain; 3.10 to 3.12 have it on the
    internal _sslobj. Without either, pinning cannot be done: refused."""
    getter = getattr(sock, "get_unverified_chain", None)
    if getter is not None:
        chain = getter()
    else:
        inner = getattr(getattr(sock, "_sslobj", None), "get_unverified_chain", None)
        if inner is None:
            raise TLSVerificationError("TLS: this Python cannot read the server's certificate "
                                       "chain, so it cannot check a pinned CA (Python 3.10 or later "
                                       "is needed); use ca_file instead")
        chain = inner()
    out = []
    for cert in chain or []:
        out.append(cert if isinstance(cert, bytes) else cert.public_bytes(ssl._ssl.ENCODING_DER))
    return out


def _base_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION
    if hasattr(ssl, "OP_NO_RENEGOTIATION"):
        ctx.options |= ssl.OP_NO_RENEGOTIATION
    return ctx


class TlsPolicy:
    """Wraps connected sockets in TLS as `settings` say, raising
    :class:`~gpupool.TLSVerificationError` when the server fails the check
    and :class:`~gpupool.Unavailable` when the handshake fails otherwise."""

    def __init__(self, settings: TlsSettings):
        self.settings = settings.validated()
        self._lock = threading.Lock()
        self._anchors: Dict[str, bytes] = {}  # "host:port" -> the pinned CA's DER
        self._contexts: Dict[bytes, ssl.SSLContext] = {}
        self._plain: Optional[ssl.SSLContext] = None

    # ---- contexts ----
    def _context_for_anchor(self, der: bytes) -> ssl.SSLContext:
        with self._lock:
            ctx = self._contexts.get(der)
            if ctx is None:
                ctx = _base_context()
                ctx.check_hostname = False  # pinned: the CA is the pool's own
                ctx.verify_mode = ssl.CERT_REQUIRED
                ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
                ctx.load_verify_locations(cadata=der)  # the only trust anchor
                self._contexts[der] = ctx
            return ctx

    def _unpinned_context(self) -> ssl.SSLContext:
        with self._lock:
            if self._plain is None:
                s = self.settings
                ctx = _base_context()
                if s.insecure:
                    ctx.check_hostname = False
                    ctx.verify_mode = ssl.CERT_NONE
                else:
                    ctx.verify_mode = ssl.CERT_REQUIRED
                    ctx.check_hostname = True
                    if s.ca_file:
                        try:
                            ctx.load_verify_locations(cafile=s.ca_file)
                        except (OSError, ssl.SSLError) as e:
                            raise BadRequest(f"TLS: cannot read the CA file {s.ca_file}: {e}") from None
                    else:
                        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
                self._plain = ctx
            return self._plain

    # ---- handshakes ----
    @staticmethod
    def _handshake(ctx: ssl.SSLContext, raw: socket.socket, host: str, url: str) -> ssl.SSLSocket:
        try:
            # SNI only for names (as the CLI: no SNI for an IP address).
            return ctx.wrap_socket(raw, server_hostname=host)
        except ssl.SSLCertVerificationError as e:
            raise TLSVerificationError(
                f"TLS: cannot verify the certificate of {url}: {e.verify_message}") from None
        except (ssl.SSLError, OSError) as e:
            raise Unavailable(f"TLS handshake with {url} failed: {e}") from None

    def _fetch_anchor(self, host: str, port: int, url: str, timeout: float) -> bytes:
        """The certificate of the chain `url` presents whose fingerprint is
        the pin, from a handshake without verification that carries nothing."""
        key = f"{host}:{port}"
        with self._lock:
            if key in self._anchors:
                return self._anchors[key]
        probe_ctx = _base_context()
        probe_ctx.check_hostname = False
        probe_ctx.verify_mode = ssl.CERT_NONE
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise NotConnected(f"cannot connect to {url}: {e}") from None
        sock = self._handshake(probe_ctx, raw, host, url)
        try:
            chain = _peer_chain(sock)
        finally:
            sock.close()
        pin = self.settings.ca_fingerprint
        for der in chain:
            if fingerprint_of(der) == pin:
                with self._lock:
                    self._anchors[key] = der
                return der
        raise TLSVerificationError(f"TLS: the server's certificate chain does not contain the pinned "
                                   f"CA {pin}; refusing to connect to {url}")

    def prepare(self, host: str, port: int, url: str, timeout: float) -> None:
        """Before connecting to host:port: in pinned mode, fetch the pinned
        CA from the chain the server presents, unless known already (so the
        probe is not made while another connection to the server waits)."""
        if self.settings.ca_fingerprint:
            self._fetch_anchor(host, port, url, timeout)

    def wrap(self, raw: socket.socket, host: str, port: int, url: str, timeout: float) -> ssl.SSLSocket:
        """`raw` (connected to host:port) in TLS, checked as the settings say.
        Closes `raw` on failure."""
        try:
            if not self.settings.ca_fingerprint:
                return self._handshake(self._unpinned_context(), raw, host, url)
            pin = self.settings.ca_fingerprint
            anchor = self._fetch_anchor(host, port, url, timeout)
            try:
                sock = self._context_for_anchor(anchor).wrap_socket(raw, server_hostname=host)
            except ssl.SSLCertVerificationError as e:
                with self._lock:  # fetch the chain again next time
                    self._anchors.pop(f"{host}:{port}", None)
                raise TLSVerificationError(
                    f"TLS: the server's certificate does not verify against the pinned CA {pin}: "
                    f"{e.verify_message}; refusing to connect to {url}") from None
            except (ssl.SSLError, OSError) as e:
                raise Unavailable(f"TLS handshake with {url} failed: {e}") from None
            # As the CLI: the pinned CA must be in the chain presented, too.
            if pin not in (fingerprint_of(der) for der in _peer_chain(sock)):
                sock.close()
                with self._lock:
                    self._anchors.pop(f"{host}:{port}", None)
                raise TLSVerificationError(f"TLS: the server's certificate chain does not contain "
                                           f"the pinned CA {pin}; refusing to connect to {url}")
            return sock
        except BaseException:
            raw.close()
            raise
