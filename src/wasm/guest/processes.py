# multiprocessing's processes, queues, pipes and managers, on the sandbox's one thread. A
# WASI CPython has no processes (and no _multiprocessing): Process().start() failed on
# os.WNOHANG, Queue() on the missing module. Here a Process is one of threads.py's
# threads (it runs when something waits for it: join(), a queue or pipe it would fill),
# and queues, pipes, locks, values and managers are their threading counterparts.
# Unlike a real process, it shares the notebook's memory: what it changes in globals,
# the caller sees (results sent through a queue, a pipe or a manager arrive either way).

__sandbox_internal__ = True

import itertools
import queue
import sys
import threading

_numbers = itertools.count(1)
_pids = itertools.count(3)  # the interpreter itself is pid 2 (posix_user.py)


class Process:
    """multiprocessing.Process on one thread: start() queues it, join() runs it (see
    threads.py); exitcode is 0, the code of a SystemExit, or 1 after an exception,
    whose traceback is printed as a child process prints it."""

    def __init__(self, group=None, target=None, name=None, args=(), kwargs=None, *, daemon=None):
        if group is not None:
            raise AssertionError("group argument must be None for now")
        self._target, self._args, self._kwargs = target, tuple(args), dict(kwargs or {})
        self._name = name or f"{type(self).__name__}-{next(_numbers)}"
        self._daemon = bool(daemon)
        self._thread = None
        self._pid = None
        self.exitcode = None

    def run(self):
        """What the process does: its target, unless a subclass says otherwise."""
        if self._target is not None:
            self._target(*self._args, **self._kwargs)

    def start(self):
        if self._thread is not None:
            raise AssertionError("cannot start a process twice")
        self._pid = next(_pids)
        self._thread = threading.Thread(target=self._bootstrap, name=self._name, daemon=self._daemon)
        self._thread.start()

    def _bootstrap(self):
        import os

        real_exit = os._exit
        os._exit = _end_process  # ends this process, not the interpreter
        try:
            self._run_as_child()
        finally:
            os._exit = real_exit

    def _run_as_child(self):
        import _sandbox_threads

        try:
            self.run()
            self.exitcode = 0
        except _sandbox_threads.NeedsAnotherThread:
            raise
        except SystemExit as exc:
            code = exc.code
            self.exitcode = code if isinstance(code, int) else (0 if code is None else 1)
            if code is not None and not isinstance(code, int):
                sys.stderr.write(f"{code}\n")
        except BaseException as exc:  # noqa: BLE001 - printed, as a child process prints it
            import traceback

            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_globals.get("__sandbox_internal__"):
                tb = tb.tb_next
            sys.stderr.write(f"Process {self._name}:\n")
            traceback.print_exception(type(exc), exc, tb)
            self.exitcode = 1

    def join(self, timeout=None):
        if self._thread is None:
            raise AssertionError("can only join a started process")
        self._thread.join(timeout)

    def is_alive(self):
        return self._thread is not None and self.exitcode is None and self._thread.is_alive()

    def terminate(self):
        """Ends a process that has not run yet (exit code -15); one that ran keeps its own."""
        import _sandbox_threads

        if self._thread is not None and self._thread in _sandbox_threads.pending:
            _sandbox_threads.take(self._thread)
            self.exitcode = -15

    def kill(self):
        self.terminate()
        if self.exitcode == -15:
            self.exitcode = -9

    def close(self):
        if self.is_alive():
            raise ValueError("Cannot close a process while it is still running. "
                             "You should first call join() or terminate().")

    @property
    def name(self):
        return self._name

    @name.setter
    def name(self, name):
        self._name = name

    @property
    def daemon(self):
        return self._daemon

    @daemon.setter
    def daemon(self, daemonic):
        self._daemon = bool(daemonic)

    @property
    def pid(self):
        return self._pid

    ident = pid

    @property
    def sentinel(self):
        raise NotImplementedError("a sandbox process has no sentinel to wait on; use join()")

    def __repr__(self):
        state = ("initial" if self._thread is None else "started" if self.exitcode is None
                 else f"stopped exitcode={self.exitcode}")
        return f"<{type(self).__name__} name={self._name!r} {state}>"


def _end_process(code):
    """os._exit() in a process: the process ends there, with that exit code."""
    raise SystemExit(code)


class Queue(queue.Queue):
    """multiprocessing.Queue: queue.Queue with a process queue's extra methods."""

    def close(self):
        pass

    def join_thread(self):
        pass

    def cancel_join_thread(self):
        pass


class JoinableQueue(Queue):
    """multiprocessing.JoinableQueue: task_done() and join() are queue.Queue's."""


class SimpleQueue(queue.SimpleQueue):
    """multiprocessing.SimpleQueue."""

    def close(self):
        pass


class Connection:
    """One end of a Pipe(): what it sends, the other end receives."""

    def __init__(self, inbox, outbox, readable=True, writable=True):
        self._inbox, self._outbox = inbox, outbox
        self.readable, self.writable, self.closed = readable, writable, False

    def send(self, obj):
        if not self.writable:
            raise OSError("connection is read-only")
        self._outbox.put(obj)

    def recv(self):
        if not self.readable:
            raise OSError("connection is write-only")
        return self._inbox.get()

    send_bytes = send

    def recv_bytes(self, maxlength=None):
        return bytes(self.recv())

    def poll(self, timeout=0.0):
        return not self._inbox.empty()

    def close(self):
        self.closed = True

    def fileno(self):
        raise OSError("a sandbox pipe has no file descriptor")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def Pipe(duplex=True):
    """Two connected ends; with duplex=False the first only receives, the second sends."""
    there, back = Queue(), Queue()
    if duplex:
        return Connection(back, there), Connection(there, back)
    return Connection(there, None, writable=False), Connection(None, there, readable=False)


class Synchronized:
    """What Value and Array share: a lock (the one given, or an RLock of their own),
    get_lock(), get_obj(), and use as the lock itself in a with statement."""

    def _take_lock(self, lock):
        self._lock = lock if hasattr(lock, "acquire") else threading.RLock()

    def get_lock(self):
        return self._lock

    def get_obj(self):
        return self

    def __enter__(self):
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)


class Value(Synchronized):
    """multiprocessing.Value: .value, and a lock (get_lock(), or the value as one)."""

    def __init__(self, typecode_or_type=None, *args, lock=True):
        self.value = args[0] if args else 0
        self._take_lock(lock)

    def __repr__(self):
        return f"<Synchronized wrapper for {self.value!r}>"


class Array(Synchronized, list):
    """multiprocessing.Array: a list with a lock."""

    def __init__(self, typecode_or_type=None, size_or_initializer=0, *, lock=True):
        items = ([0] * size_or_initializer if isinstance(size_or_initializer, int)
                 else list(size_or_initializer))
        super().__init__(items)
        self._take_lock(lock)


class Namespace:
    """A manager's Namespace: attributes set on it."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def __repr__(self):
        return "Namespace(" + ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()) + ")"


class Manager:
    """multiprocessing.Manager(): its shared objects are plain ones (the sandbox's
    processes share its memory)."""

    def __init__(self, *args, **kwargs):
        pass

    def start(self, *args, **kwargs):
        pass

    def shutdown(self):
        pass

    join = connect = shutdown

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    dict = staticmethod(dict)
    list = staticmethod(list)
    Namespace = staticmethod(Namespace)
    Value = staticmethod(Value)
    Array = staticmethod(Array)

    def Queue(self, maxsize=0):
        return Queue(maxsize)

    def JoinableQueue(self, maxsize=0):
        return JoinableQueue(maxsize)

    def Lock(self):
        return threading.Lock()

    def RLock(self):
        return threading.RLock()

    def Semaphore(self, value=1):
        return threading.Semaphore(value)

    def BoundedSemaphore(self, value=1):
        return threading.BoundedSemaphore(value)

    def Event(self):
        return threading.Event()

    def Condition(self, lock=None):
        return threading.Condition(lock)

    def Barrier(self, parties, action=None, timeout=None):
        return threading.Barrier(parties, action, timeout)


def patch_multiprocessing(multiprocessing):
    """Every context (the default one, get_context('spawn'), ...) makes the classes above;
    the module's own names follow."""
    context = sys.modules["multiprocessing.context"]
    made = {
        "Queue": lambda self, maxsize=0: Queue(maxsize),
        "JoinableQueue": lambda self, maxsize=0: JoinableQueue(maxsize),
        "SimpleQueue": lambda self: SimpleQueue(),
        "Pipe": lambda self, duplex=True: Pipe(duplex),
        "Lock": lambda self: threading.Lock(),
        "RLock": lambda self: threading.RLock(),
        "Semaphore": lambda self, value=1: threading.Semaphore(value),
        "BoundedSemaphore": lambda self, value=1: threading.BoundedSemaphore(value),
        "Event": lambda self: threading.Event(),
        "Condition": lambda self, lock=None: threading.Condition(lock),
        "Barrier": lambda self, parties, action=None, timeout=None: threading.Barrier(parties, action, timeout),
        "Value": lambda self, typecode_or_type, *args, lock=True: Value(typecode_or_type, *args, lock=lock),
        "Array": lambda self, typecode_or_type, size_or_initializer, *, lock=True: Array(
            typecode_or_type, size_or_initializer, lock=lock),
        "Manager": lambda self: Manager(),
    }
    for name, function in made.items():
        function.__name__ = name
        setattr(context.BaseContext, name, function)
    for module in (multiprocessing, context):
        module.Process = Process
    for ctx in [context._default_context, *getattr(context, "_concrete_contexts", {}).values()]:
        ctx.Process = Process
    for name in made:
        setattr(multiprocessing, name, getattr(context._default_context, name))
    Process.__module__ = Queue.__module__ = JoinableQueue.__module__ = "multiprocessing"
