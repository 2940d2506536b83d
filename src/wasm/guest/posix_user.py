# POSIX facts a WASI CPython lacks, answered as a lone unprivileged user would answer
# them, so that pure-Python packages that merely look (platformdirs, black, getpass,
# click...) import and run: os.getuid() and friends, os.getlogin(), os.getgroups(), and
# stand-ins for the `pwd` and `grp` modules knowing that one user; os.cpu_count() is 2;
# time.process_time() counts the CPU time the host measures. Nothing here grants anything:
# setuid and kill stay absent, and the sandbox has no other users or processes.

__sandbox_internal__ = True

import os

USER = "user"
UID = GID = 1000
HOME = "/"
SHELL = "/bin/false"  # there is no shell in the sandbox
PID = 2
# What os.cpu_count() says. The sandbox runs one piece of work at a time whatever it
# says, and code sizes pools as cpu_count() - 1 (0 workers is an error), so it says 2.
CPUS = 2


def getuid():
    """The sandbox's one user: 1000, not root."""
    return UID


def getgid():
    """The group of the sandbox's one user: 1000."""
    return GID


def getgroups():
    """The groups of the sandbox's one user."""
    return [GID]


def getlogin():
    """The name of the sandbox's one user."""
    return USER


def getpid():
    """The interpreter's process id (it has no other processes)."""
    return PID


def getppid():
    return 1


def getpgrp():
    return PID


def getsid(pid=0):
    return PID


def getresuid():
    return (UID, UID, UID)


def getresgid():
    return (GID, GID, GID)


def umask(mask):
    """Files are created with the sandbox's own permissions; the old mask, 022, is returned."""
    return 0o022


def cpu_count():
    """2: pools sized cpu_count() - 1 get one worker (pieces run one at a time anyway)."""
    return CPUS


FUNCTIONS = {
    "getuid": getuid, "geteuid": getuid, "getgid": getgid, "getegid": getgid,
    "getgroups": getgroups, "getlogin": getlogin, "getpid": getpid, "getppid": getppid,
    "getpgrp": getpgrp, "getsid": getsid, "getresuid": getresuid, "getresgid": getresgid,
    "umask": umask,
}


def system(command):
    """Runs pip through the sandbox's installer; nothing else can run (there are no
    processes): exit status 127, and a line on stderr saying what to use instead."""
    import _sandbox_pip

    return _sandbox_pip.system(command)


def patch_os():
    """Adds what `os` (and `posix`) lack of FUNCTIONS; what the runtime has is kept.
    os.system runs pip only."""
    import posix

    for name, function in FUNCTIONS.items():
        for module in (os, posix):
            if not hasattr(module, name):
                setattr(module, name, function)
    os.system = system
    os.cpu_count = cpu_count
    if hasattr(os, "process_cpu_count"):
        os.process_cpu_count = cpu_count


# What `signal` has natively and WASI has not: timers and waiting for a signal. Asking for
# one says why (hasattr() stays False, so libraries that look first take their other path).
NO_SIGNALS = {"alarm", "setitimer", "getitimer", "pause", "siginterrupt", "sigwait",
              "sigtimedwait", "sigwaitinfo", "pthread_kill", "pthread_sigmask", "sigpending",
              "ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF", "ItimerError"}


def patch_signal(signal):
    """signal.alarm() and the other timers: an AttributeError that says what to use."""
    def missing(name):
        if name in NO_SIGNALS:
            raise AttributeError(
                f"module 'signal' has no attribute {name!r}: nothing sends signals in the "
                "sandbox, so no timer can interrupt its code; execute_code's timeout_seconds "
                "bounds a run, and a loop can check time.monotonic() against a deadline itself",
                name=name, obj=signal)
        raise AttributeError(f"module 'signal' has no attribute {name!r}", name=name, obj=signal)

    signal.__getattr__ = missing


# Values of TZ that name UTC, the only local time the sandbox has.
UTC_NAMES = {"", "UTC", "UTC0", "UTC+0", "UTC-0", "GMT", "GMT0", "Etc/UTC", "Etc/GMT",
             "Etc/Zulu", "Zulu", "Universal", "Etc/Universal", ":UTC", ":Etc/UTC"}


def patch_time(time):
    """time.process_time() counts CPU time, and time.tzset() says what it can do."""
    patch_process_time(time)
    if not hasattr(time, "tzset"):
        patch_tzset(time)


def patch_process_time(time):
    """time.process_time(), process_time_ns() and os.times(): WASI has no CPU clock, so
    CPython counts the wall time since the interpreter started (a sleeping cell seemed to
    burn CPU), and python-3.12's and os.times() were ten million times too large (WASI's
    times() counts nanoseconds where CPython reads clock ticks). The host measures the CPU
    time the interpreter burns, with the clock of the thread that runs it; these ask it
    (under 2 us a call). Without a host to ask (a runtime with no door) they count the
    wall time since the interpreter started. The count never goes back: in a fork, or a
    sandbox brought back after a restart, it goes on from where it was. (WASI's monotonic
    clock starts at 0 with each interpreter, a snapshot's too, so it is the wall time
    since this one started.)"""
    try:
        import _host
    except ImportError:
        _host = None

    def measured():
        if _host is not None:
            try:
                return int(_host.call(b"cpu_time"))
            except (OSError, ValueError):  # a host that does not know the question
                pass
        return time.monotonic_ns()

    counted = [0, 0]  # what is added to the measure (it started again), the last answer

    def process_time_ns():
        """CPU time the interpreter has burned, in nanoseconds."""
        now = measured() + counted[0]
        if now < counted[1]:
            counted[0] += counted[1] - now
            now = counted[1]
        counted[1] = now
        return now

    def process_time():
        """CPU time the interpreter has burned, in seconds."""
        return process_time_ns() / 1_000_000_000

    def times():
        """The interpreter's CPU time as user time (the thread's clock does not split user
        and system time); no children; elapsed: the wall time since it started."""
        cpu = process_time()
        return os.times_result((cpu, 0.0, 0.0, 0.0, time.monotonic()))

    clock_info = time.get_clock_info

    def get_clock_info(name):
        """As time.get_clock_info, with the process clock this sandbox gives."""
        if name != "process_time":
            return clock_info(name)
        import types

        return types.SimpleNamespace(
            implementation="the host's CPU clock of the interpreter's thread" if _host else
            "monotonic clock since the interpreter started", monotonic=True, adjustable=False,
            resolution=1e-09)

    for function in (process_time_ns, process_time, get_clock_info):
        function.__module__, function.__qualname__ = "time", function.__name__
    times.__module__, times.__qualname__ = "os", "times"
    time.process_time_ns, time.process_time = process_time_ns, process_time
    time.get_clock_info = get_clock_info
    if hasattr(os, "times_result"):
        os.times = times


def patch_tzset(time):
    """time.tzset(): WASI has no local time zones (local time is UTC). Setting TZ to UTC
    and calling it is accepted, as it changes nothing; another zone is refused with what
    works instead, rather than leaving local time silently in UTC."""

    def tzset():
        zone = os.environ.get("TZ", "")
        if zone.strip() not in UTC_NAMES:
            raise OSError(f"time.tzset(): local time here is always UTC, so TZ={zone!r} cannot "
                          "take effect; use zoneinfo instead (datetime.now(ZoneInfo("
                          f"{zone.lstrip(':')!r})), or pandas' tz_convert)")

    time.tzset = tzset


def fill(module):
    """Fills the stand-in `pwd` or `grp` module."""
    if module.__name__ == "pwd":
        fill_pwd(module)
    else:
        fill_grp(module)


def struct_type(name, fields, doc):
    """A tuple type with named fields, as the C modules' struct types are."""
    def make(cls, values):
        self = tuple.__new__(cls, values)
        return self

    namespace = {"__new__": make, "__doc__": doc, "n_fields": len(fields), "n_sequence_fields": len(fields),
                 "__repr__": lambda self: f"{name}(" + ", ".join(f"{f}={v!r}" for f, v in zip(fields, self)) + ")"}
    for index, field in enumerate(fields):
        namespace[field] = property(lambda self, i=index: self[i])
    return type(name, (tuple,), namespace)


def fill_pwd(module):
    struct_passwd = struct_type(
        "struct_passwd", ("pw_name", "pw_passwd", "pw_uid", "pw_gid", "pw_gecos", "pw_dir", "pw_shell"),
        "pwd.struct_passwd: the sandbox's one user.")
    struct_passwd.__module__ = "pwd"
    entry = struct_passwd((USER, "x", UID, GID, "sandbox user", HOME, SHELL))

    def getpwuid(uid):
        """The password database entry of user id `uid` (only the sandbox's one user)."""
        if int(uid) != UID:
            raise KeyError(f"getpwuid(): uid not found: {uid}")
        return entry

    def getpwnam(name):
        """The password database entry of user `name` (only the sandbox's one user)."""
        if name != USER:
            raise KeyError(f"getpwnam(): name not found: {name!r}")
        return entry

    def getpwall():
        return [entry]

    module.struct_passwd = struct_passwd
    module.getpwuid, module.getpwnam, module.getpwall = getpwuid, getpwnam, getpwall
    module.__doc__ = "The password database of the sandbox: one unprivileged user."


def fill_grp(module):
    struct_group = struct_type("struct_group", ("gr_name", "gr_passwd", "gr_gid", "gr_mem"),
                               "grp.struct_group: the sandbox's one group.")
    struct_group.__module__ = "grp"
    entry = struct_group((USER, "x", GID, [USER]))

    def getgrgid(gid):
        if int(gid) != GID:
            raise KeyError(f"getgrgid(): gid not found: {gid}")
        return entry

    def getgrnam(name):
        if name != USER:
            raise KeyError(f"getgrnam(): name not found: {name!r}")
        return entry

    def getgrall():
        return [entry]

    module.struct_group = struct_group
    module.getgrgid, module.getgrnam, module.getgrall = getgrgid, getgrnam, getgrall
    module.__doc__ = "The group database of the sandbox: one group."
