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


def use_sandbox_loop(asyncio):
    """Makes SandboxEventLoop what asyncio.new_event_loop() and asyncio.run() use."""
    events = asyncio.events
    get_policy = getattr(events, "_get_event_loop_policy", None) or events.get_event_loop_policy
    get_policy()._loop_factory = loop_class()
