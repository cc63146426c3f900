"""canopy.torch: a torch.distributed rendezvous without a connection storm on rank 0.

    import canopy.torch
    canopy.torch.init_process_group("gloo")      # instead of torch.distributed.init_process_group

Under canopy the c10d store is canopy's own (`Store`): each rank talks only to its node's canopyd, which routes
every request up the daemon tree to the job's store at the root. Rank 0 also picks a free port and publishes
"addr:port" through PMIx (one fence), so MASTER_ADDR/MASTER_PORT are right for any code that reads them.
Under another PMIx launcher the same published address serves a TCPStore on rank 0; a singleton keeps its
store in the process. Under torchrun, and under any other launcher that set MASTER_ADDR and MASTER_PORT, it is
torch's own env:// rendezvous; so it is under mpiexec.hydra, srun or PALS without PMIx, which have no way to
carry rank 0's address (set MASTER_ADDR and MASTER_PORT there).
"""

import datetime
import os
import socket

import torch
import torch.distributed as dist

import canopy

__all__ = ["Store", "init_process_group", "master_address", "rendezvous"]

# The PMIx key under which rank 0 publishes "addr:port".
MASTER_KEY = "torch.master_addr_port"


def _seconds(timeout):
    """A c10d timeout (timedelta, 0 = none) as canopy's: seconds, or None for no limit."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
    return None if seconds <= 0 else seconds


class Store(dist.Store):
    """A torch.distributed Store backed by canopy's job-wide store (HashStore semantics).

    get and wait block up to the store's timeout (`set_timeout`, default 300 s); add is serialised at the
    root daemon. Works wherever canopy.store_available() is true (under canopy, or in a singleton)."""

    def __init__(self, timeout=None):
        super().__init__()
        if timeout is not None:
            self.set_timeout(timeout if isinstance(timeout, datetime.timedelta)
                             else datetime.timedelta(seconds=timeout))

    def set(self, key, value):
        canopy.store_set(key, value)

    def get(self, key):
        return canopy.store_get(key, timeout=_seconds(self.timeout))

    def add(self, key, amount):
        return canopy.store_add(key, amount)

    def compare_set(self, key, expected_value, desired_value):
        return canopy.store_compare_set(key, expected_value, desired_value)

    def check(self, keys):
        return canopy.store_check(keys)

    def wait(self, keys, timeout=None):
        canopy.store_wait(keys, timeout=_seconds(self.timeout if timeout is None else timeout))

    def delete_key(self, key):
        return canopy.store_delete(key)

    def num_keys(self):
        return canopy.store_num_keys()

    # torch 1.13's C++ trampoline looks these two up by their C++ names (PrefixStore calls them).
    deleteKey = delete_key
    getNumKeys = num_keys


def _free_port(address, wanted):
    """`wanted` if it can be bound on this host, else a port the kernel picks. The socket is closed again,
    so another process could take the port before it is used: this only fills MASTER_PORT for code that
    reads it; canopy's own rendezvous does not use it."""
    for port in ([wanted] if wanted else []) + [0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("", port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise RuntimeError(f"canopy.torch: cannot bind any TCP port on {address}")


def _own_address():
    # MASTER_ADDR is rank 0's node as canopy placed it; elsewhere one lookup of our own name, on rank 0 only.
    return os.environ.get("MASTER_ADDR") or socket.gethostbyname(socket.gethostname())


def master_address(tcp_store_timeout=None):
    """Rank 0 chooses "addr:port" and publishes it through PMIx; after one fence every rank returns
    (addr, port, tcp_store). tcp_store is a TCPStore (server on rank 0) when canopy's store is not
    available here (another PMIx launcher), else None."""
    wanted = int(os.environ.get("MASTER_PORT", "0") or 0)
    use_tcp = not canopy.store_available()
    tcp_store = None
    if canopy.size() == 1 and canopy.mode() == "singleton":
        address = os.environ.get("MASTER_ADDR", "127.0.0.1")
        return address, _free_port(address, wanted), None
    if canopy.rank() == 0:
        address = _own_address()
        if use_tcp:
            # The server must not wait for its clients here: they learn its port only after the fence below.
            tcp_store = dist.TCPStore(address, wanted, canopy.size(), True,
                                      tcp_store_timeout or datetime.timedelta(seconds=300), wait_for_workers=False)
            port = tcp_store.port
        else:
            port = _free_port(address, wanted)
        canopy.put(MASTER_KEY, f"{address}:{port}")
        canopy.commit()
    canopy.fence()
    address, _, port = canopy.get(0, MASTER_KEY).decode().rpartition(":")
    port = int(port)
    if use_tcp and canopy.rank() != 0:
        tcp_store = dist.TCPStore(address, port, canopy.size(), False,
                                  tcp_store_timeout or datetime.timedelta(seconds=300))
    return address, port, tcp_store


def _exchange_available():
    """True when put, fence and get reach every rank (canopy, PMIx, or a job of one rank)."""
    try:
        canopy.commit()
        return True
    except canopy.NotAvailableError:
        return False


def rendezvous():
    """How init_process_group meets the other ranks: "canopy" (canopy's store, or a TCPStore whose address
    PMIx carries) or "env" (torch's env://, from MASTER_ADDR and MASTER_PORT)."""
    mode = canopy.mode()
    if mode in ("canopy", "singleton"):
        return "canopy"
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        return "env"
    if _exchange_available():
        return "canopy"
    raise RuntimeError(f"canopy.torch: rank {canopy.rank()} was started by {mode} without a PMIx server, and "
                       "MASTER_ADDR and MASTER_PORT are not set: set them to rank 0's host and a free port (torch's "
                       "env://), or run under canopy")


def init_process_group(backend=None, timeout=None, **kwargs):
    """torch.distributed.init_process_group with canopy's rank, world size and store.

    backend: as torch's ("gloo", "nccl", ...); default "nccl" with CUDA, else "gloo". timeout: a timedelta
    for the process group and the store (torch's default: 30 min). Other keywords go to torch, except
    store, rank, world_size and init_method, which canopy supplies. Stamps the phase app.init_process_group.
    Returns the store; None where the rendezvous is torch's env:// (see rendezvous())."""
    for supplied in ("store", "rank", "world_size", "init_method"):
        if supplied in kwargs:
            raise TypeError(f"canopy.torch.init_process_group supplies {supplied} itself; do not pass it")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if timeout is None:
        timeout = dist.default_pg_timeout
    with canopy.phase("init_process_group"):
        if rendezvous() == "env":
            dist.init_process_group(backend, init_method="env://", rank=canopy.rank(), world_size=canopy.size(),
                                    timeout=timeout, **kwargs)
            return None
        address, port, tcp_store = master_address(timeout)
        os.environ["MASTER_ADDR"] = address
        os.environ["MASTER_PORT"] = str(port)
        store = tcp_store if tcp_store is not None else Store(timeout)
        dist.init_process_group(backend, store=store, rank=canopy.rank(), world_size=canopy.size(),
                                timeout=timeout, **kwargs)
    return store
