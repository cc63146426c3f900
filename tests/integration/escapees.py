"""A rank for test_teardown.py: starts processes that try every way out of a job's process tree, each writing its
pid to OUT/NAME.pid, then prints "started" and exits. Usage: escapees.py OUT"""
import ctypes, os, sys, time
out = sys.argv[1]

def record(name):
    with open(f"{out}/{name}.pid", "w") as f:
        f.write(str(os.getpid()))

def clear_environment_block():
    # As setproctitle does: the block /proc/PID/environ shows is overwritten, so nothing there names the job.
    libc = ctypes.CDLL(None)
    libc.strlen.restype = ctypes.c_size_t
    libc.strlen.argtypes = [ctypes.c_void_p]
    environ = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
    i = 0
    while environ[i]:
        ctypes.memset(environ[i], 0, libc.strlen(environ[i]))
        i += 1

def detach(name, session=True, group=False, clear_env=False, double_fork=False, ignore_term=False, keep_parent=False):
    if os.fork() != 0:
        return
    if session:
        os.setsid()
    if group:
        os.setpgid(0, 0)
    if double_fork and os.fork() != 0:
        if keep_parent:
            record(name + ".parent")
            while True:
                time.sleep(1)
        os._exit(0)
    if clear_env:
        clear_environment_block()
    if ignore_term:
        import signal
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
    record(name)
    while True:
        time.sleep(1)

detach("setsid")
detach("new_group", session=False, group=True)
detach("double_fork", double_fork=True)
detach("double_fork_cleared_env", double_fork=True, clear_env=True)
detach("ignores_term", double_fork=True, ignore_term=True)
detach("parent_outlives", double_fork=True, keep_parent=True)
detach("cleared_env_own_group", session=False, group=True, clear_env=True, double_fork=True)
time.sleep(1)
print("started", os.environ.get("CANOPY_JOBID"))
