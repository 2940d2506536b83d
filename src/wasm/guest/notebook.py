# What makes a sandbox answer code written for a notebook: installed by the driver at
# start. It registers, cheaply, what the other guest modules do when the code needs them
# (each module is compiled only then, or ahead of time in a runtime's snapshot):
#
# - cells holding IPython's syntax are read by syntax.py (`transform`);
# - get_ipython() is shell.py's shell, with the magics of magics.py;
# - `IPython` and `pip` are stand-ins (ipython.py, pip_door.py), and pip run from code
#   (subprocess, os.system) goes to the host's installer too;
# - threading, concurrent.futures and multiprocessing's pools work on one core (threads.py),
#   and so do multiprocessing's processes, queues, pipes and managers (processes.py);
# - urllib3, requests, httpx, aiohttp and http.client go through the door (http_clients.py),
#   and a socket's lookup or connection says there are none;
# - os has the user facts packages look up at import (posix_user.py);
# - breakpoint() and pdb.set_trace() say there is no debugger here, and the code goes on;
# - urlparse() keeps the URLs it splits, as before CPython 3.15 (url_parse.py).

__sandbox_internal__ = True

import sys

# (module imported, guest module, its function that patches it)
IMPORT_PATCHES = (
    ("threading", "_sandbox_threads", "patch_threading"),
    ("queue", "_sandbox_threads", "patch_queue"),
    ("tqdm", "_sandbox_threads", "patch_tqdm"),
    ("concurrent.futures", "_sandbox_threads", "patch_futures"),
    ("concurrent.futures.thread", "_sandbox_threads", "patch_futures_thread"),
    ("concurrent.futures.process", "_sandbox_threads", "patch_futures_process"),
    ("multiprocessing.pool", "_sandbox_threads", "patch_pool"),
    ("multiprocessing", "_sandbox_processes", "patch_multiprocessing"),
    ("subprocess", "_sandbox_pip", "patch_subprocess"),
    ("urllib3", "_sandbox_http_clients", "patch_urllib3"),
    ("requests", "_sandbox_http_clients", "patch_requests"),
    ("httpx", "_sandbox_http_clients", "patch_httpx"),
    ("aiohttp", "_sandbox_http_clients", "patch_aiohttp"),
    ("http.client", "_sandbox_http_clients", "patch_http_client"),
    ("socket", "_sandbox_http_clients", "patch_socket"),
    ("tqdm.notebook", "_sandbox_display", "patch_tqdm_notebook"),
    ("plotly.io", "_sandbox_display", "patch_plotly"),
    ("pdb", "_sandbox_notebook", "patch_pdb"),
    ("getpass", "_sandbox_notebook", "patch_getpass"),
    ("signal", "_sandbox_posix", "patch_signal"),
    ("time", "_sandbox_posix", "patch_time"),
    ("traceback", "_sandbox_missing", "patch_traceback"),
    ("numpy", "_sandbox_numpy_flags", "patch_numpy"),
    ("urllib.parse", "_sandbox_url_parse", "patch_urllib_parse"),
)
# Compiled ahead of time in a runtime's snapshot, so no cell pays for them.
AHEAD = ("_sandbox_syntax", "_sandbox_shell", "_sandbox_redirects", "_sandbox_cell_code", "_sandbox_magics",
         "_sandbox_shell_magics", "_sandbox_history", "_sandbox_numpy_flags",
         "_sandbox_timing", "_sandbox_help", "_sandbox_images", "_sandbox_values", "_sandbox_missing", "_sandbox_display", "_sandbox_pretty", "_sandbox_ipython",
         "_sandbox_pip", "_sandbox_threads", "_sandbox_processes", "_sandbox_python_cmd", "_sandbox_store",
         "_sandbox_http", "_sandbox_http_clients", "_sandbox_ssl", "_sandbox_asyncio", "_sandbox_url_parse")

_api = []


def install(api):
    """Registers the patches; in a runtime with a snapshot, compiles every guest module
    now (and makes the standard modules they patch importable at once)."""
    _api.append(api)
    import _sandbox_posix

    _sandbox_posix.patch_os()
    sys.breakpointhook = no_debugger
    sys.modules["builtins"].input = no_input
    for name, module, function in IMPORT_PATCHES:
        api.patch_on_import(name, patcher(module, function))
    if api.turns:
        for module in AHEAD:
            __import__(module)


def no_debugger(*args, **kwargs):
    """breakpoint() and pdb.set_trace(): the debugger reads its commands from input, which
    the sandbox does not have (it would quit the program at once); a line says so, and the
    code goes on."""
    sys.stderr.write("[breakpoint ignored: the debugger needs input, which the sandbox does "
                     "not have; print the variables you need, or use the traceback]\n")


def no_input(prompt=""):
    """input(): reads a line from sys.stdin as CPython's does (code that puts answers in
    sys.stdin gets them); at the end of it, which is at once for the sandbox's empty stdin,
    the EOFError says why and what to do instead."""
    if prompt:
        sys.stdout.write(str(prompt))
        sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError("input() has nothing to read: code in the sandbox cannot ask "
                       "questions (its stdin is empty); put the answer in the code instead")
    return line[:-1] if line.endswith("\n") else line


def patch_getpass(getpass):
    """getpass.getpass() is input() (see no_input): there is no terminal to hide it on."""
    getpass.getpass = lambda prompt="Password: ", stream=None: no_input(prompt)


def patch_pdb(pdb):
    """pdb.set_trace() is breakpoint() (see no_debugger); pdb.pm() and post_mortem() say
    the same of a post-mortem."""
    pdb.set_trace = no_debugger
    pdb.pm = pdb.post_mortem = no_post_mortem


def no_post_mortem(*args, **kwargs):
    """pdb.pm() and pdb.post_mortem(): the debugger would need input here too."""
    sys.stderr.write("[no post-mortem debugger: it needs input, which the sandbox does not "
                     "have; the traceback (traceback.print_last()) and sys.last_exc have what "
                     "the error left]\n")


def patcher(module, function):
    def patch(target):
        getattr(__import__(module), function)(target)

    return patch


def transform(code):
    """A cell with IPython's syntax as plain Python (as many lines as it had)."""
    import _sandbox_syntax

    api = _api[0]
    namespace = api.namespace
    return _sandbox_syntax.transform_cell(
        code,
        automagic=api.automagic,
        shadowed=lambda name: name in namespace or hasattr(sys.modules["builtins"], name),
    )
