# Threads, as far as one core allows. A WASI CPython cannot start a thread ("can't start
# new thread"), yet code written for CPython uses threads for independent work, where the
# order in which the pieces run does not change the results. Here:
#
# - threading.Thread.start() queues the thread; it runs, to its end, when something waits
#   for it: join(), a lock, an event, a condition, a queue or a semaphore that it could
#   release (then the queued threads run one after another, those of the running cell
#   first, until the wait is satisfied). A thread nothing waits for stays queued, from
#   cell to cell, until something does (a note at the end of the cell it was started in
#   says so, once): a heartbeat that never ends costs nothing, and a consumer started in
#   one cell and fed and joined in the next sees what was fed. current_thread() names it
#   while it runs, and an exception in it is reported by threading.excepthook, as CPython
#   does.
# - A thread that, while it runs, would wait for something nothing else can do (an empty
#   queue, an event no one sets) stops there, silently but for a one-line note: it would
#   block forever in CPython too, and it cannot resume here. is_alive() stays true for it,
#   and join() then raises NeedsAnotherThread instead of pretending it finished.
# - concurrent.futures' ThreadPoolExecutor and ProcessPoolExecutor, multiprocessing's Pool
#   and ThreadPool run each task when it is submitted and hand back finished futures and
#   results, so map(), submit().result(), as_completed(), asyncio.to_thread() and
#   loop.run_in_executor() give the results they give in CPython.
# - A wait that nothing could ever satisfy (no queued thread can release the lock, set
#   the event, fill the queue) raises NeedsAnotherThread at once, saying so, instead of
#   hanging; a wait with a timeout sleeps it out and gives up, as CPython would.

__sandbox_internal__ = True

import contextvars
import sys
import time

pending = []   # threads (or raw tasks) started and not yet run, oldest first
started_in = {}  # id(task) -> the number of the cell that started it, for those in pending
noted = set()  # ids of tasks in pending that a note at the end of a cell named already
cells = [0]    # the number of the cell running now
_ids = [1 << 16]  # what Thread.ident says of a queued thread
running = []   # threads running now, innermost last
stuck = {}  # thread -> what it stopped waiting for (held, so a note can name it)
told = set()  # ids of stuck threads a note named already
polled = []  # queued threads the main code polled since its last sleep, to run then
doomed = {}  # id(thread) -> (its error, the code it runs) for threads that met a wait
#              nothing could satisfy and are leaving
# Modules whose frames are the machinery of a wait, not the code waiting.
INTERNAL = ("threading", "queue", "concurrent.futures", "_sandbox_threads")


def internal(frame):
    """Whether `frame` is the machinery of a wait (threading, queue, this module)."""
    return frame.f_globals.get("__name__", "").startswith(INTERNAL)


class NeedsAnotherThread(BaseException):
    """The code waits for something only another running thread could do; the sandbox
    runs Python on one thread. Not an Exception: a worker's `except Exception` loop
    cannot swallow it and spin (as KeyboardInterrupt, it ends the wait's caller)."""

    what = "something"


# What a wait is for, by the function of threading, queue or concurrent.futures doing it.
WAITS = (("Event.wait", "an event to be set"), ("Queue.get", "an item in an empty queue"),
         ("Queue.put", "room in a full queue"), ("Queue.join", "a queue's tasks to be done"),
         ("SimpleQueue.get", "an item in an empty queue"), ("Barrier.wait", "the other parties of a barrier"),
         ("Semaphore.acquire", "a semaphore to be released"), ("Condition.wait", "a condition to be notified"),
         ("Future.result", "a future's result"), ("Future.exception", "a future's result"))


def waiting_for():
    """What the code is waiting for, from the frames of the wait."""
    found = "a lock that is held"
    frame = sys._getframe(2)
    while frame is not None and internal(frame):
        name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        found = next((what for suffix, what in WAITS if name.endswith(suffix)), found)
        frame = frame.f_back
    return found


def blocked(what):
    error = NeedsAnotherThread(
        f"this would wait forever for {what}: the sandbox runs Python on one thread, so "
        "nothing else can ever do it (a started thread runs when it is waited for, to its "
        "end, one at a time; code that needs two threads running at once cannot work here)"
    )
    error.what = what
    if running:
        doom(running[-1], error)
    return error


def doom(thread, error):
    """In CPython the thread would block here for good: none of its own code runs
    again. Here it cannot block, so its code is made to stop: every line of it that would
    still run (an `except:` that retries, a `finally` that signals it is done) raises
    the error again, until it has left the thread (sys.monitoring's line events, on the
    code of its frames outside threading and queue, whose locks unwind as they should)."""
    tool = monitor_tool()
    if tool is None:
        return
    monitoring = sys.monitoring
    codes = []
    frame = sys._getframe(2)
    while frame is not None and frame.f_code is not run_thread.__code__:
        if not internal(frame):
            codes.append(frame.f_code)
            monitoring.set_local_events(tool, frame.f_code, monitoring.events.LINE)
        frame = frame.f_back
    doomed[id(thread)] = (error, codes)


def undoom(thread):
    """The thread has left: its code runs normally again."""
    error_codes = doomed.pop(id(thread), None)
    if error_codes is None or not MONITOR:
        return
    still = {code for _, codes in doomed.values() for code in codes}
    for code in error_codes[1]:
        if code not in still:
            sys.monitoring.set_local_events(MONITOR[0], code, 0)


MONITOR = []  # the sys.monitoring tool id taken, once taken


def monitor_tool():
    """The sys.monitoring tool id whose line events stop a doomed thread's code."""
    if not MONITOR:
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is None:
            return None
        for tool in (4, 3):
            try:
                monitoring.use_tool_id(tool, "sandbox threads")
            except ValueError:
                continue
            monitoring.register_callback(tool, monitoring.events.LINE, stop_the_line)
            MONITOR.append(tool)
            break
        else:
            return None
    return MONITOR[0]


def stop_the_line(code, line):
    """A line of a doomed thread's code is about to run: it raises instead."""
    if running and id(running[-1]) in doomed:
        raise doomed[id(running[-1])][0]


def queue(task):
    """Queues a started thread (or raw task) to run when something waits for it."""
    pending.append(task)
    started_in[id(task)] = cells[0]


def take(task):
    """Takes a task out of the queue, to run it."""
    pending.remove(task)
    started_in.pop(id(task), None)
    noted.discard(id(task))


def run_next(this_cell_only=False):
    """Runs the oldest queued thread (or raw task) of the running cell to its end, or
    else (unless `this_cell_only`) the oldest of an earlier cell; False if there is
    none."""
    if not pending:
        return False
    task = next((t for t in pending if started_in.get(id(t)) == cells[0]), None)
    if task is None:
        if this_cell_only:
            return False
        task = pending[0]
    take(task)
    if callable(task) and not hasattr(task, "run"):
        run_task(task)
    else:
        run_thread(task)
    return True


def at_cell_end():
    """The end of a cell: cancelled timers end, the threads still queued stay queued (a
    note names those not named before), and the threads that stopped in a wait nothing
    could satisfy are named once."""
    cells[0] += 1
    polled.clear()
    import threading

    for timer in [t for t in pending if cancelled(threading, t)]:
        take(timer)  # cancelled (matplotlib's font cache warning, say): it would do nothing
        run_thread(timer)
    fresh = [t for t in pending if id(t) not in noted]
    noted.update(id(t) for t in fresh)
    if fresh:
        names = ", ".join(getattr(t, "name", "a thread") for t in fresh[:5])
        more = f" and {len(fresh) - 5} more" if len(fresh) > 5 else ""
        sys.stderr.write(
            f"[{len(fresh)} thread(s) started and not run yet ({names}{more}): the sandbox runs a "
            "thread when something waits for it (join(), a lock, an event, a queue), to its end, "
            "one at a time]\n"
        )
    for thread in [t for t in list(stuck) if id(t) not in told]:
        told.add(id(thread))
        sys.stderr.write(
            f"[{thread.name} stopped where it would wait forever for {stuck[thread]}: nothing else "
            "could do it then, on the sandbox's one thread, and it cannot resume]\n"
        )


def cancelled(threading, task):
    """Whether a queued task is a timer that was cancelled (it would end at once)."""
    return isinstance(task, threading.Timer) and task.finished.is_set()


class Lock:
    """threading.Lock for one real thread: acquiring a held lock runs the queued threads
    (one of them may release it), then sleeps out a timeout or raises NeedsAnotherThread."""

    __slots__ = ("_held",)

    def __init__(self):
        self._held = False

    def acquire(self, blocking=True, timeout=-1):
        if not self._held:
            self._held = True
            return True
        if not blocking:
            return False
        # A wait with a timeout runs only the threads its own cell started: one queued
        # in an earlier cell and never waited for is often a heartbeat that never ends,
        # and the wait would never come back.
        timed = timeout is not None and timeout >= 0
        while self._held and run_next(this_cell_only=timed):
            pass
        if not self._held:
            self._held = True
            return True
        if timeout is not None and timeout >= 0:
            time.sleep(timeout)
            return False
        raise blocked(waiting_for())

    def release(self):
        if not self._held:
            raise RuntimeError("release unlocked lock")
        self._held = False

    def locked(self):
        return self._held

    def _at_fork_reinit(self):
        self._held = False

    __enter__ = acquire

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        return f"<{'locked' if self._held else 'unlocked'} {type(self).__module__}.Lock object at {id(self):#x}>"


Lock.__module__ = "_thread"


def patch_threading(threading):
    """Thread.start() queues, join() runs; locks are Lock above (so every primitive
    built on them, in threading and queue, waits the same way)."""
    threading.Lock = threading._allocate_lock = Lock
    threading._CRLock = None  # RLock() is then threading's Python RLock, on Lock above
    Thread = threading.Thread

    def start(self):
        if not self._initialized:
            raise RuntimeError("thread.__init__() not called")
        if self._started.is_set():
            raise RuntimeError("threads can only be started once")
        _ids[0] += 1
        self._ident = self._native_id = _ids[0]
        self._started.set()
        queue(self)

    def join(self, timeout=None):
        if not self._initialized:
            raise RuntimeError("Thread.__init__() not called")
        if not self._started.is_set():
            raise RuntimeError("cannot join thread before it is started")
        if running and running[-1] is self:
            raise RuntimeError("cannot join current thread")
        if self in pending:
            take(self)
            run_thread(self)
        if self in stuck:
            if timeout is not None:
                time.sleep(max(timeout, 0))
                return
            raise blocked(f"{self.name} to end, which stopped at a wait for {stuck[self]} "
                          "that nothing could satisfy")
        if self in running:
            raise blocked(f"{self.name} to end, which is waiting itself")

    original_is_alive = Thread.is_alive

    def is_alive(self):
        if self is threading.main_thread() or isinstance(self, threading._DummyThread):
            return original_is_alive(self)
        poll([self])
        return self in pending or self in running or self in stuck

    start.__doc__, join.__doc__, is_alive.__doc__ = Thread.start.__doc__, Thread.join.__doc__, Thread.is_alive.__doc__
    Thread.start, Thread.join, Thread.is_alive = start, join, is_alive
    # Queued and stopped threads are alive: enumerate() and active_count() count them.
    original_enumerate = threading.enumerate

    def enumerate():
        listed = original_enumerate()
        queued = [t for t in pending if isinstance(t, Thread) and not cancelled(threading, t)
                  and t not in listed]
        poll(queued)
        return listed + queued + [t for t in stuck if t not in listed]

    def active_count():
        return len(enumerate())

    enumerate.__doc__, active_count.__doc__ = original_enumerate.__doc__, threading.active_count.__doc__
    threading.enumerate, threading.active_count = enumerate, active_count
    patch_sleep(time)
    import _thread

    def start_new_thread(function, args, kwargs=None):
        queue(lambda: function(*args, **(kwargs or {})))
        return len(pending)

    _thread.start_new_thread = start_new_thread
    # While a thread runs, get_ident() names it (RLock and Condition then know their
    # owner). threading.local stays the C one, shared with the thread that runs it: a
    # Python one keyed on the running thread costs 100 times as much per attribute.
    real_get_ident = _thread.get_ident

    def get_ident():
        return running[-1]._ident if running else real_get_ident()

    get_ident.__doc__ = real_get_ident.__doc__
    _thread.get_ident = threading.get_ident = get_ident
    # A raw lock waits the same way (a C lock's blocking wait would stop the interpreter).
    _thread.allocate_lock = _thread.allocate = Lock


def poll(threads):
    """Notes queued threads the main code looked at, to run at its next sleep."""
    if not running:
        polled.extend(t for t in threads if t in pending and t not in polled)


def patch_sleep(module):
    """time.sleep() in the main code first runs the queued threads it polled since its
    last sleep (is_alive(), enumerate(), active_count()): a polling loop waits for them
    as join() does. Any other queued thread stays queued (a consumer waiting for what
    the main code has yet to feed would stop there for good)."""
    real_sleep = module.sleep

    def sleep(seconds):
        while polled and not running:
            thread = polled.pop(0)
            if thread in pending:
                take(thread)
                run_thread(thread)
        real_sleep(seconds)

    sleep.__doc__ = real_sleep.__doc__
    module.sleep = sleep


def patch_tqdm(tqdm):
    """tqdm starts no monitor thread: the monitor loops until the program ends, so the
    first wait that ran it (any queue, lock or event wait after a progress bar) would
    never return; all it does is adjust how often a slow bar redraws."""
    tqdm.tqdm.monitor_interval = 0


def patch_queue(queue):
    """SimpleQueue is queue's Python one, on the locks above (the C one's blocking get
    would stop the interpreter)."""
    queue.SimpleQueue = queue._PySimpleQueue


def run_thread(thread):
    """Runs a started thread to its end, as the thread it is."""
    import threading

    running.append(thread)
    threading._active[thread._ident] = thread
    # The caller's trace and profile functions are its own; a thread starts with those
    # threading.settrace() and setprofile() name.
    traced = sys.gettrace(), sys.getprofile()
    sys.settrace(getattr(threading, "_trace_hook", None))
    sys.setprofile(getattr(threading, "_profile_hook", None))
    try:
        # A thread starts with a context of its own, as in CPython (decimal's context,
        # numpy's error settings and context variables it sets stay its own), or the one
        # it was given (Thread(context=...)).
        context = getattr(thread, "_context", None) or contextvars.Context()
        off_the_loop(context.run, thread.run)
    except SystemExit:
        pass
    except NeedsAnotherThread as exc:
        stuck[thread] = exc.what
    except BaseException as exc:  # noqa: BLE001 - reported as CPython reports a thread's
        # The thread's own frames, as CPython shows them (none of this module's).
        frames = exc.__traceback__
        while frames is not None and frames.tb_frame.f_globals.get("__name__") == __name__:
            frames = frames.tb_next
        exc.__traceback__ = frames
        report(threading, exc, thread)
    finally:
        sys.settrace(traced[0])
        sys.setprofile(traced[1])
        undoom(thread)
        running.pop()
        threading._active.pop(thread._ident, None)


def report(threading, exc, thread):
    """Reports an exception a thread ended with through threading.excepthook; one
    raised by the hook itself is printed as CPython prints it."""
    try:
        threading.excepthook(threading.ExceptHookArgs([type(exc), exc, exc.__traceback__, thread]))
    except BaseException as failed:  # noqa: BLE001 - printed, as CPython does
        sys.stderr.write("Exception in threading.excepthook:\n")
        sys.excepthook(type(failed), failed, failed.__traceback__)


def off_the_loop(call, *args, **kwargs):
    """Runs `call` as on another thread, where no asyncio loop is running (so it may
    run asyncio.run() of its own, as a worker thread may)."""
    events = sys.modules.get("asyncio.events")
    loop = events._get_running_loop() if events else None
    if loop is None:
        return call(*args, **kwargs)
    swap = getattr(sys.modules.get("asyncio.tasks"), "_swap_current_task", None)
    task = swap(loop, None) if swap else None
    events._set_running_loop(None)
    try:
        return call(*args, **kwargs)
    finally:
        events._set_running_loop(loop)
        if swap:
            swap(loop, task)


def run_task(task):
    """Runs a raw task of _thread.start_new_thread to its end; an exception in it is
    printed, as CPython prints one of such a thread."""
    try:
        task()
    except (SystemExit, NeedsAnotherThread):
        pass
    except BaseException:  # noqa: BLE001 - reported as CPython reports it
        import traceback

        sys.stderr.write("Exception ignored in thread started by a task of _thread:\n")
        traceback.print_exc()


# ---- executors and pools ----------------------------------------------------------------

def executor_classes():
    """ThreadPoolExecutor and ProcessPoolExecutor that run each task as it is submitted."""
    import os
    from concurrent.futures import _base

    class InlineExecutor(_base.Executor):
        """Runs each submitted call at once, on the sandbox's one thread, and hands back
        its finished future (the results are those of a pool of workers)."""

        def __init__(self, max_workers=None, *args, initializer=None, initargs=(), **kwargs):
            if max_workers is not None and max_workers <= 0:
                raise ValueError("max_workers must be greater than 0")
            self._max_workers = max_workers or min(32, (os.cpu_count() or 1) + 4)
            self._initializer, self._initargs = initializer, initargs
            self._initialized = initializer is None
            self._shutdown = False
            self._broken = False
            # The workers' context: the initializer's settings, which each task sees.
            self._context = contextvars.Context()

        def submit(self, fn, /, *args, **kwargs):
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._broken:
                raise _base.BrokenExecutor(self._broken)
            if not self._initialized:
                self._initialized = True
                try:
                    self._context.run(self._initializer, *self._initargs)
                except BaseException:
                    self._broken = "A worker initializer failed, the pool is not usable anymore"
                    raise _base.BrokenExecutor(self._broken) from None
            future = _base.Future()
            future.set_running_or_notify_cancel()
            try:
                # In the workers' context (a copy: a task may submit another), as on a
                # worker thread.
                result = off_the_loop(self._context.copy().run, fn, *args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - the future carries it, as a worker's would
                future.set_exception(exc)
            else:
                future.set_result(result)
            return future

        def shutdown(self, wait=True, *, cancel_futures=False):
            self._shutdown = True

    class ThreadPoolExecutor(InlineExecutor):
        __doc__ = InlineExecutor.__doc__

    class ProcessPoolExecutor(InlineExecutor):
        __doc__ = InlineExecutor.__doc__

    # Named as concurrent.futures names its own (in reprs and tracebacks).
    ThreadPoolExecutor.__module__ = "concurrent.futures.thread"
    ProcessPoolExecutor.__module__ = "concurrent.futures.process"
    ThreadPoolExecutor.__qualname__, ProcessPoolExecutor.__qualname__ = "ThreadPoolExecutor", "ProcessPoolExecutor"
    return ThreadPoolExecutor, ProcessPoolExecutor


_executors = []


def executors():
    if not _executors:
        _executors.extend(executor_classes())
    return _executors


def patch_futures(futures):
    """concurrent.futures hands out the inline executors."""
    futures.ThreadPoolExecutor, futures.ProcessPoolExecutor = executors()


def patch_futures_thread(module):
    module.ThreadPoolExecutor = executors()[0]


def patch_futures_process(module):
    module.ProcessPoolExecutor = executors()[1]


class AsyncResult:
    """What Pool.apply_async() and map_async() hand back: a result computed already."""

    def __init__(self, compute, callback=None, error_callback=None):
        try:
            self._value, self._success = compute(), True
        except Exception as exc:  # noqa: BLE001 - raised again by get(), as a pool's would
            self._value, self._success = exc, False
        if self._success and callback is not None:
            callback(self._value)
        if not self._success and error_callback is not None:
            error_callback(self._value)

    def ready(self):
        return True

    def successful(self):
        return self._success

    def wait(self, timeout=None):
        pass

    def get(self, timeout=None):
        if self._success:
            return self._value
        raise self._value


class Pool:
    """multiprocessing's Pool (and ThreadPool) on the sandbox's one thread: each task runs
    when it is given, in order; the results are those of a pool of workers."""

    def __init__(self, processes=None, initializer=None, initargs=(), maxtasksperchild=None, context=None):
        if processes is not None and processes < 1:
            raise ValueError("Number of processes must be at least 1")
        self._processes = processes or 1
        self._state = "RUN"
        if initializer is not None:
            initializer(*initargs)

    def _check_running(self):
        if self._state != "RUN":
            raise ValueError("Pool not running")

    def apply(self, func, args=(), kwds={}):
        self._check_running()
        return func(*args, **kwds)

    def apply_async(self, func, args=(), kwds={}, callback=None, error_callback=None):
        self._check_running()
        return AsyncResult(lambda: func(*args, **kwds), callback, error_callback)

    def map(self, func, iterable, chunksize=None):
        self._check_running()
        return [func(item) for item in iterable]

    def map_async(self, func, iterable, chunksize=None, callback=None, error_callback=None):
        self._check_running()
        return AsyncResult(lambda: [func(item) for item in iterable], callback, error_callback)

    def starmap(self, func, iterable, chunksize=None):
        self._check_running()
        return [func(*item) for item in iterable]

    def starmap_async(self, func, iterable, chunksize=None, callback=None, error_callback=None):
        self._check_running()
        return AsyncResult(lambda: [func(*item) for item in iterable], callback, error_callback)

    def imap(self, func, iterable, chunksize=1):
        self._check_running()
        return (func(item) for item in list(iterable))

    imap_unordered = imap

    def close(self):
        self._state = "CLOSE"

    def terminate(self):
        self._state = "TERMINATE"

    def join(self):
        if self._state == "RUN":
            raise ValueError("Pool is still running")

    def __enter__(self):
        self._check_running()
        return self

    def __exit__(self, *exc):
        self.terminate()


def patch_pool(module):
    """multiprocessing.pool's Pool and ThreadPool run tasks in order, at once."""
    class ThreadPool(Pool):
        __doc__ = Pool.__doc__

    Pool.__module__ = ThreadPool.__module__ = "multiprocessing.pool"
    ThreadPool.__qualname__ = "ThreadPool"
    module.Pool, module.ThreadPool = Pool, ThreadPool
