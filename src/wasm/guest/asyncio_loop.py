# The asyncio loop of a sandbox: WASI has no sockets, so asyncio's default loop cannot
# even start (it makes a socket pair to wake itself). Coroutines, tasks and sleeps need
# none of that: this loop runs them, waiting with time.sleep. The driver makes it
# asyncio's default as asyncio is imported (so this module imports asyncio only then).

__sandbox_internal__ = True

_loop_class = []


def loop_class():
    """SandboxEventLoop, made once asyncio is imported."""
    if _loop_class:
        return _loop_class[0]
    import asyncio.base_events
    import time

    class NoSelector:
        """The loop's idea of I/O: there is none; waiting is sleeping."""

        def select(self, timeout=None):
            if timeout is None:
                raise RuntimeError(
                    "the event loop has nothing left to run and would wait forever: "
                    "something awaits a future that nothing will complete (this sandbox "
                    "has no network, subprocesses or threads to complete it)"
                )
            if timeout > 0:
                time.sleep(timeout)
            return []

        def close(self):
            pass

    class SandboxEventLoop(asyncio.base_events.BaseEventLoop):
        """An asyncio loop for coroutines, tasks and timers, without I/O."""

        def __init__(self):
            super().__init__()
            self._selector = NoSelector()

        def _process_events(self, event_list):
            pass

        def _write_to_self(self):
            pass

        async def shutdown_default_executor(self, timeout=None):
            """Shuts the default executor down here (asyncio's own waits for a thread
            that, on the sandbox's one thread, would run only when waited for)."""
            self._executor_shutdown_called = True
            if self._default_executor is not None:
                self._default_executor.shutdown(wait=True)

    _loop_class.append(SandboxEventLoop)
    return SandboxEventLoop


def use_sandbox_loop(asyncio, cell_loop):
    """Makes SandboxEventLoop what asyncio.new_event_loop() and asyncio.run() use; code
    outside any running loop gets the cells' loop (see patch_cell_tasks)."""
    events = asyncio.events
    get_policy = getattr(events, "_get_event_loop_policy", None) or events.get_event_loop_policy
    get_policy()._loop_factory = loop_class()
    patch_cell_tasks(asyncio, cell_loop)


def patch_cell_tasks(asyncio, cell_loop):
    """In a notebook, cells run inside the kernel's running loop: create_task() and
    ensure_future() start a task that runs while the kernel is idle, and
    get_event_loop() is that loop. Here, code that runs outside any loop (a cell without
    a top-level await) gets the cells' loop instead: a task it creates runs between
    cells (see settle) and whenever a cell awaits, and get_event_loop() hands the loop
    back (its run_until_complete() works, where a notebook's running loop refuses)."""
    events, tasks = asyncio.events, asyncio.tasks
    real_create_task, real_get_event_loop = tasks.create_task, events.get_event_loop

    def create_task(coro, **kwargs):
        if events._get_running_loop() is None:
            return cell_loop().create_task(coro, **kwargs)
        return real_create_task(coro, **kwargs)

    def get_event_loop():
        if events._get_running_loop() is None:
            try:
                return real_get_event_loop()
            except RuntimeError:
                return cell_loop()
        return real_get_event_loop()

    create_task.__doc__, get_event_loop.__doc__ = real_create_task.__doc__, real_get_event_loop.__doc__
    asyncio.create_task = tasks.create_task = create_task
    asyncio.get_event_loop = events.get_event_loop = get_event_loop


# How long the tasks cells started may run between two cells without waiting.
SETTLE_SECONDS = 1.0


def settle(loop):
    """Runs the loop's ready callbacks and the timers that are due, as long as any are
    (within SETTLE_SECONDS), never waiting: a task that awaits a sleep resumes once its
    time has come, at a later cell."""
    if loop.is_closed() or loop.is_running() or not (loop._ready or loop._scheduled):
        return
    import asyncio.events
    import time

    if asyncio.events._get_running_loop() is not None:
        return  # called inside another loop's run: its tasks run there

    deadline = time.monotonic() + SETTLE_SECONDS
    asyncio.events._set_running_loop(loop)
    try:
        while time.monotonic() < deadline and (loop._ready or due(loop)):
            loop._run_once()
    finally:
        asyncio.events._set_running_loop(None)


def due(loop):
    """Whether the loop's earliest timer is due now."""
    return bool(loop._scheduled) and loop._scheduled[0]._when <= loop.time()
