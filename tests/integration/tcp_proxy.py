"""A TCP relay between a program and a server, that a test can cut.

    with TcpProxy("127.0.0.1", 5432) as proxy:
        url = f"postgresql://gpupool@127.0.0.1:{proxy.port}/postgres"
        ...
        proxy.cut()    # bytes stop moving both ways; connections stay open
        proxy.heal()   # they move again (what was held back, too)

A cut is what a network partition looks like from either end, or a peer
that hung: connections neither close nor answer. (The sender's kernel still
acknowledges what it sends to the relay, so TCP's own timeouts, such as
TCP_USER_TIMEOUT, do not fire: only the program's own deadlines help. That
is the harder case: a real partition also loses the acknowledgements.)
"""
import selectors
import socket
import threading


class TcpProxy:
    def __init__(self, host, port):
        self.target = (host, port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        self._lock = threading.Lock()
        self._sockets = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def cut(self):
        self._flowing.clear()

    def heal(self):
        self._flowing.set()

    def close(self):
        self._closed = True
        self._flowing.set()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                try:
                    s.close()
                except OSError:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, a, b):
        """Moves bytes between a and b until either closes; while cut, reads
        nothing (the bytes wait in the kernels' buffers)."""
        peer = {a: b, b: a}
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ)
        sel.register(b, selectors.EVENT_READ)
        try:
            while not self._closed:
                self._flowing.wait()
                for key, _ in sel.select(timeout=0.1):
                    if not self._flowing.is_set():
                        break
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    peer[key.fileobj].sendall(data)
        except OSError:
            pass
        finally:
            sel.close()
            a.close()
            b.close()
