//! Code a model writes for a notebook, run as written: a corpus of notebook
//! idioms (magics, shell lines, pip, IPython.display, threads, POSIX lookups,
//! and the ones that worked before), each run over MCP in a fresh scientific
//! sandbox and checked against what a notebook user sees (the output IPython
//! gives for it, checked with IPython natively where it could be). The HTTP
//! clients have their own file (notebook_http.rs), and so do pip's routes and
//! refusals (notebook_pip.rs).

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::support::{Server, scientific_cache, structured, text};

/// What one idiom's last cell gave, as a client reads it.
pub struct Outcome {
    pub result: CallToolResult,
    pub json: Value,
}

impl Outcome {
    pub fn stdout(&self) -> &str {
        self.json["stdout"]["text"].as_str().unwrap_or("")
    }

    pub fn stderr(&self) -> &str {
        self.json["stderr"]["text"].as_str().unwrap_or("")
    }

    pub fn value(&self) -> &str {
        self.json["value"].as_str().unwrap_or("")
    }

    pub fn has_value(&self) -> bool {
        self.json["value"].is_string()
    }

    pub fn error(&self) -> &str {
        self.json["error"]["name"].as_str().unwrap_or("")
    }

    pub fn error_text(&self) -> String {
        format!(
            "{}: {}\n{}",
            self.error(),
            self.json["error"]["value"].as_str().unwrap_or(""),
            self.json["error"]["traceback"].as_str().unwrap_or("")
        )
    }

    /// The MIME types of the image content, in order.
    pub fn images(&self) -> Vec<String> {
        self.result
            .content
            .iter()
            .filter_map(|c| c.as_image().map(|i| i.mime_type.clone()))
            .collect()
    }

    /// The widths in pixels of the PNG images, in order.
    pub fn png_widths(&self) -> Vec<u32> {
        use base64::Engine;
        self.result
            .content
            .iter()
            .filter_map(|c| c.as_image())
            .filter_map(|i| {
                base64::engine::general_purpose::STANDARD
                    .decode(&i.data)
                    .ok()
            })
            .filter(|png| png.len() > 24 && png.starts_with(b"\x89PNG"))
            .map(|png| u32::from_be_bytes([png[16], png[17], png[18], png[19]]))
            .collect()
    }

    pub fn is_error(&self) -> bool {
        self.result.is_error == Some(true)
    }
}

/// One idiom: its cells (run in order in one fresh sandbox) and what the last
/// must show; `check` says what is wrong, if anything.
pub struct Idiom {
    pub name: &'static str,
    pub cells: &'static [&'static str],
    pub check: fn(&Outcome) -> Result<(), String>,
}

/// `Err(why)` unless `ok`.
pub fn expect(ok: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(why()) }
}

/// The run finished without an exception or a limit.
pub fn clean(o: &Outcome) -> Result<(), String> {
    expect(!o.is_error(), || format!("failed: {}", text(&o.result)))
}

/// Clean, and the value is `value`.
pub fn value_is(o: &Outcome, value: &str) -> Result<(), String> {
    clean(o)?;
    expect(o.value() == value, || {
        format!(
            "value {:?}, wanted {value:?}; {}",
            o.value(),
            text(&o.result)
        )
    })
}

/// Clean, and stdout holds every one of `parts`.
pub fn stdout_has(o: &Outcome, parts: &[&str]) -> Result<(), String> {
    clean(o)?;
    for part in parts {
        expect(o.stdout().contains(part), || {
            format!("stdout lacks {part:?}: {}", text(&o.result))
        })?;
    }
    Ok(())
}

/// Clean, and stderr holds `part`.
/// The run finished cleanly and printed exactly `wanted`.
pub fn stdout_is(o: &Outcome, wanted: &str) -> Result<(), String> {
    clean(o)?;
    expect(o.stdout() == wanted, || {
        format!("stdout {:?}, wanted {wanted:?}", o.stdout())
    })
}

pub fn stderr_has(o: &Outcome, part: &str) -> Result<(), String> {
    clean(o)?;
    expect(o.stderr().contains(part), || {
        format!("stderr lacks {part:?}: {}", text(&o.result))
    })
}

/// A server for the corpus: the scientific runtime, the real wheels on a
/// loopback index, no warm pool.
pub async fn server(index_url: &str, env: &[(&str, &str)]) -> Server {
    scientific_cache();
    let mut all = vec![
        ("SANDBOX_RUNTIME", "scientific"),
        ("SANDBOX_POOL_SIZE", "0"),
        ("SANDBOX_INDEX_URL", index_url),
        ("PIP_CONFIG_FILE", "/dev/null"),
    ];
    all.extend_from_slice(env);
    Server::start_with(&all).await
}

/// Runs each idiom in a fresh sandbox; every failure is listed at the end.
pub async fn run_corpus(server: &Server, corpus: &[Idiom]) {
    let mut failures = Vec::new();
    for idiom in corpus {
        let id = server.create_with(json!({})).await;
        let mut last = None;
        for cell in idiom.cells {
            let result = server
                .call(
                    "execute_code",
                    json!({"session_id": id, "code": cell, "timeout_seconds": 120}),
                )
                .await;
            last = Some(result);
        }
        let result = last.expect("an idiom has a cell");
        let outcome = Outcome {
            json: structured(&result),
            result,
        };
        if let Err(why) = (idiom.check)(&outcome) {
            failures.push(format!("{}: {why}", idiom.name));
        }
        server.ok("close_sandbox", json!({"session_id": id})).await;
    }
    assert!(
        failures.is_empty(),
        "{} of {} idioms failed:\n{}",
        failures.len(),
        corpus.len(),
        failures.join("\n\n")
    );
}

const CORPUS: &[Idiom] = &[
    Idiom {
        name: "%pip install, then import on the next line",
        cells: &["%pip install humanize\nimport humanize\nhumanize.intcomma(1234567)"],
        check: |o| {
            stdout_has(o, &["Successfully installed humanize-4.17.0"])?;
            value_is(o, "'1,234,567'")
        },
    },
    Idiom {
        name: "!pip install",
        cells: &["!pip install humanize\nimport humanize\nhumanize.naturalsize(1000000)"],
        check: |o| value_is(o, "'1.0 MB'"),
    },
    Idiom {
        name: "pip install alone in a cell (automagic)",
        cells: &[
            "pip install humanize",
            "import humanize\nhumanize.ordinal(3)",
        ],
        check: |o| value_is(o, "'3rd'"),
    },
    Idiom {
        name: "subprocess running python -m pip",
        cells: &[
            "import subprocess, sys\nsubprocess.check_call([sys.executable, '-m', 'pip', 'install', 'humanize'])\nimport humanize\nhumanize.apnumber(4)",
        ],
        check: |o| {
            stdout_has(o, &["Successfully installed humanize"])?;
            value_is(o, "'four'")
        },
    },
    Idiom {
        name: "pip.main",
        cells: &[
            "import pip\ncode = pip.main(['install', 'humanize'])\nimport humanize\n(code, humanize.intword(1200000))",
        ],
        check: |o| value_is(o, "(0, '1.2 million')"),
    },
    Idiom {
        name: "%pip install of a package built into the runtime",
        cells: &["%pip install six"],
        check: |o| {
            stdout_has(
                o,
                &["Requirement already satisfied: six in the runtime (1.17.0)"],
            )
        },
    },
    Idiom {
        name: "%pip install -q says nothing",
        cells: &["%pip install -q humanize\nimport humanize"],
        check: |o| {
            clean(o)?;
            expect(o.stdout().is_empty(), || {
                format!("stdout: {:?}", o.stdout())
            })
        },
    },
    Idiom {
        name: "%pip install of an unknown package prints pip's error and carries on",
        cells: &["%pip install no-such-package-anywhere\nprint('after')"],
        check: |o| {
            stdout_has(o, &["after"])?;
            stderr_has(o, "ERROR: ")?;
            stderr_has(o, "no-such-package-anywhere")
        },
    },
    Idiom {
        name: "%conda says to use %pip",
        cells: &["%conda install numpy"],
        check: |o| {
            expect(o.error() == "UsageError", || o.error_text())?;
            expect(o.error_text().contains("%pip install"), || o.error_text())
        },
    },
    Idiom {
        name: "%matplotlib inline and a plot",
        cells: &[
            "%matplotlib inline\nfrom matplotlib_inline.backend_inline import set_matplotlib_formats\nset_matplotlib_formats('retina')\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()",
        ],
        check: |o| {
            clean(o)?;
            expect(o.images() == ["image/png"], || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "a trailing `;` keeps the plot and hides the value",
        cells: &["import matplotlib.pyplot as plt\nplt.plot([1, 2]);"],
        check: |o| {
            clean(o)?;
            expect(!o.has_value(), || format!("value {:?}", o.value()))?;
            expect(o.images().len() == 1, || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "%config and %load_ext autoreload",
        cells: &[
            "%config InlineBackend.figure_format = 'retina'\n%load_ext autoreload\n%autoreload 2\n'ok'",
        ],
        check: |o| value_is(o, "'ok'"),
    },
    Idiom {
        name: "%time of a statement, then its value",
        cells: &["%time total = sum(range(10**5))\ntotal"],
        check: |o| {
            stdout_has(o, &["CPU times: total: ", "Wall time: "])?;
            value_is(o, "4999950000")
        },
    },
    Idiom {
        name: "%time of an expression gives its value",
        cells: &["%time sum(range(10))"],
        check: |o| {
            stdout_has(o, &["Wall time: "])?;
            value_is(o, "45")
        },
    },
    Idiom {
        name: "%time and time.process_time count CPU time, not time spent asleep",
        cells: &[
            "import time\n%time time.sleep(0.3)\nstart = time.process_time()\ntime.sleep(0.3)\nslept = time.process_time() - start\nstart = time.process_time()\nwhile time.process_time() - start < 0.1:\n    pass\n(slept < 0.05, time.process_time() - start >= 0.1)",
        ],
        check: |o| {
            // "CPU times: total: 1.2 ms": under a tenth of the 300 ms it slept.
            let line = o.stdout().lines().find(|l| l.starts_with("CPU times:"));
            let total = line.and_then(|l| l.rsplit("total: ").next()).unwrap_or("");
            let small = match total.split_once(' ') {
                Some((_, "ns" | "μs")) => true,
                Some((ms, "ms")) => ms.parse::<f64>().is_ok_and(|ms| ms < 30.0),
                _ => false,
            };
            expect(small, || o.stdout().to_owned())?;
            value_is(o, "(True, True)")
        },
    },
    Idiom {
        name: "%timeit",
        cells: &["%timeit -n 5 -r 2 sum(range(100))"],
        check: |o| {
            stdout_has(o, &[" per loop (mean ± std. dev. of 2 runs, 5 loops each)"])?;
            expect(!o.has_value(), || o.value().to_owned())
        },
    },
    Idiom {
        name: "%%time over a cell",
        cells: &["%%time\nsquares = [i * i for i in range(1000)]\nlen(squares)"],
        check: |o| {
            stdout_has(o, &["Wall time: "])?;
            value_is(o, "1000")
        },
    },
    Idiom {
        name: "%%timeit with setup",
        cells: &["%%timeit -n 3 -r 2 data = list(range(50))\nsorted(data)"],
        check: |o| stdout_has(o, &[" per loop (mean ± std. dev. of 2 runs, 3 loops each)"]),
    },
    Idiom {
        name: "%%capture keeps the output for later",
        cells: &[
            "%%capture captured\nprint('hidden')\nimport sys; print('oops', file=sys.stderr)",
            "(captured.stdout, captured.stderr)",
        ],
        check: |o| value_is(o, "('hidden\\n', 'oops\\n')"),
    },
    Idiom {
        name: "%%capture shows nothing",
        cells: &["%%capture\nprint('hidden')"],
        check: |o| {
            clean(o)?;
            expect(o.stdout().is_empty(), || o.stdout().to_owned())
        },
    },
    Idiom {
        name: "%who and %whos",
        cells: &["alpha = 123\nbeta = 'test'\n%who\n%whos"],
        check: |o| {
            stdout_has(
                o,
                &[
                    "alpha\t beta\t \n",
                    "Variable   Type    Data/Info\n----------------------------\nalpha      int     123\nbeta       str     test\n",
                ],
            )
        },
    },
    Idiom {
        name: "%env sets and reads the environment",
        cells: &["%env MY_FLAG=on\nimport os\nflag = %env MY_FLAG\n(os.environ['MY_FLAG'], flag)"],
        check: |o| value_is(o, "('on', 'on')"),
    },
    Idiom {
        name: "!ls: no shell, and what to use",
        cells: &["!ls -la\nprint('went on')"],
        check: |o| {
            stdout_has(o, &["went on"])?;
            stderr_has(
                o,
                "there is no shell in this sandbox, so `ls -la` cannot run; use os.listdir('.')",
            )
        },
    },
    Idiom {
        name: "files = !ls is an error, not a file list",
        cells: &["files = !ls\nlen(files)"],
        check: |o| {
            expect(o.error() == "NoShellError", || o.error_text())?;
            expect(
                o.error_text().contains(
                    "there is no shell in this sandbox, so `ls` cannot run; use os.listdir('.')",
                ),
                || o.error_text(),
            )
        },
    },
    Idiom {
        name: "a module written with %%writefile imports, a package too",
        cells: &[
            "%%writefile helpers.py\ndef double(x):\n    return 2 * x\n",
            "import os\nos.makedirs('src', exist_ok=True)\nopen('src/__init__.py', 'w').close()\nopen('src/utils.py', 'w').write('TAX = 0.2\\n')",
            "import helpers\nfrom src.utils import TAX\nhelpers.double(21), TAX",
        ],
        check: |o| value_is(o, "(42, 0.2)"),
    },
    Idiom {
        name: "a missing package says how packages install here",
        cells: &["import plotly.express as px"],
        check: |o| {
            expect(o.error() == "ModuleNotFoundError", || o.error_text())?;
            let said = o.error_text();
            expect(
                said.contains("No module named 'plotly': it is neither built into this runtime nor installed. `%pip install plotly`")
                    && !said.contains("Site initialization"),
                || said.clone(),
            )
        },
    },
    Idiom {
        name: "In, Out, _, __, ___, _<n>, _i",
        cells: &[
            "10 + 5",
            "x = 2",
            "'abc'",
            "print(_, __, ___, _1, Out[1], Out, In[1], In[2], _i, _ii, _i4, len(In))",
        ],
        // What IPython 9 prints for the same cells.
        check: |o| {
            stdout_has(
                o,
                &[
                    "abc 15  15 15 {1: 15, 3: 'abc'} 10 + 5 x = 2 'abc' x = 2 print(_, __, ___, _1, Out[1], Out, In[1], In[2], _i, _ii, _i4, len(In)) 5\n",
                ],
            )
        },
    },
    Idiom {
        name: "breakpoint() and pdb.set_trace() say there is no debugger, and the code goes on",
        cells: &["x = 1\nbreakpoint()\nimport pdb; pdb.set_trace()\nprint('went on', x)"],
        check: |o| {
            stdout_has(o, &["went on 1\n"])?;
            stderr_has(
                o,
                "[breakpoint ignored: the debugger needs input, which the sandbox does not have",
            )
        },
    },
    Idiom {
        name: "pandas display options the code sets are kept",
        cells: &[
            "import pandas as pd\ndf = pd.DataFrame({'n': range(70), 'text': ['x' * 80] * 70})",
            "df",
            "pd.set_option('display.max_rows', None)\npd.set_option('display.max_colwidth', None)\ndf",
        ],
        check: |o| {
            let lines: Vec<&str> = o.value().lines().collect();
            expect(lines.len() == 71, || {
                format!("{} lines: {}", lines.len(), o.value())
            })?;
            expect(lines[70].contains(&"x".repeat(80)), || o.value().to_owned())
        },
    },
    Idiom {
        name: "asyncio.create_task() in a cell without await runs between cells",
        cells: &[
            "import asyncio\nasync def fetch(n):\n    await asyncio.sleep(0.2)\n    print('fetched', n)\n    return n * 10\nasync def quick():\n    return 'q'\ntask = asyncio.create_task(fetch(4))\nq = asyncio.ensure_future(quick())\nloop = asyncio.get_event_loop()\nprint(task.done())",
            "import time\ntime.sleep(0.3)",
            "print(task.done(), task.result(), q.result())\nr = await asyncio.gather(fetch(1), fetch(2))\nr, loop.run_until_complete(fetch(3)), asyncio.run(fetch(5))",
        ],
        check: |o| {
            stdout_has(
                o,
                &["True 40 q\nfetched 1\nfetched 2\nfetched 3\nfetched 5\n"],
            )?;
            value_is(o, "([10, 20], 30, 50)")
        },
    },
    Idiom {
        name: "df.style.format() shows the formatted values",
        cells: &[
            "import pandas as pd\ndf = pd.DataFrame({'share': [0.1234, 0.5], 'n': [1, 2]})\ndf.style.format({'share': '{:.1%}'}).highlight_max()",
        ],
        check: |o| value_is(o, "   share  n\n0  12.3%  1\n1  50.0%  2"),
    },
    Idiom {
        name: "multiprocessing.Process with a Queue",
        cells: &[
            "from multiprocessing import Process, Queue\ndef square(n, q):\n    q.put((n, n * n))\nif __name__ == '__main__':\n    q = Queue()\n    ps = [Process(target=square, args=(i, q)) for i in range(4)]\n    for p in ps: p.start()\n    for p in ps: p.join()\n(sorted(q.get() for _ in range(4)), [p.exitcode for p in ps])",
        ],
        check: |o| value_is(o, "([(0, 0), (1, 1), (2, 4), (3, 9)], [0, 0, 0, 0])"),
    },
    Idiom {
        name: "multiprocessing Pipe, Value, Array and Manager",
        cells: &[
            "import multiprocessing as mp\ndef send(conn):\n    conn.send(sum(range(10)))\ndef bump(v, a):\n    with v.get_lock():\n        v.value += 1\n    a[0] += 1\ndef fill(d, i):\n    d[i] = i * i\nmine, theirs = mp.Pipe()\np = mp.Process(target=send, args=(theirs,)); p.start(); got = mine.recv(); p.join()\nv, a = mp.Value('i', 0), mp.Array('i', 3)\nps = [mp.get_context('spawn').Process(target=bump, args=(v, a)) for _ in range(3)]\n[p.start() for p in ps]; [p.join() for p in ps]\nwith mp.Manager() as m:\n    d = m.dict()\n    ps = [mp.Process(target=fill, args=(d, i)) for i in range(3)]\n    [p.start() for p in ps]; [p.join() for p in ps]\n    squares = dict(d)\n(got, v.value, list(a), squares)",
        ],
        check: |o| value_is(o, "(45, 3, [3, 0, 0], {0: 0, 1: 1, 2: 4})"),
    },
    Idiom {
        name: "a process that fails or calls os._exit() has its exit code",
        cells: &[
            "from multiprocessing import Process\nimport os\ndef bad():\n    raise ValueError('boom')\np = Process(target=bad)\np.start(); p.join()\nq = Process(target=lambda: os._exit(4))\nq.start(); q.join()\n(p.exitcode, q.exitcode)",
        ],
        check: |o| {
            value_is(o, "(1, 4)")?;
            stderr_has(o, "ValueError: boom")
        },
    },
    Idiom {
        name: "%history lists the cells run so far",
        cells: &["x = 1", "y = x + 1", "%history -n"],
        check: |o| stdout_has(o, &["   1: x = 1", "   2: y = x + 1", "   3: %history -n"]),
    },
    Idiom {
        name: "%reset forgets the code's names and keeps the notebook's",
        cells: &[
            "x = 1\nx",
            "%reset -f",
            "(len(In), 'x' in globals(), type(get_ipython()).__name__, len(Out))",
        ],
        check: |o| value_is(o, "(4, False, 'SandboxShell', 0)"),
    },
    Idiom {
        name: "%history of a huge range lists what there is at once",
        cells: &["x = 1", "%history 1-100000000000"],
        check: |o| stdout_has(o, &["x = 1", "%history 1-100000000000"]),
    },
    Idiom {
        name: "an odd ast_node_interactivity keeps cells running",
        cells: &["get_ipython().ast_node_interactivity = 3", "1 + 1"],
        check: |o| value_is(o, "2"),
    },
    Idiom {
        name: "%precision %d shows inf as repr does",
        cells: &["%precision %d", "float('inf')"],
        check: |o| value_is(o, "inf"),
    },
    Idiom {
        name: "%save writes cells to a file",
        cells: &[
            "def area(r):\n    return 3.14159 * r * r",
            "%save geometry 1",
            "from geometry import area\narea(1)",
        ],
        check: |o| value_is(o, "3.14159"),
    },
    Idiom {
        name: "%precision formats floats",
        cells: &[
            "%precision 3",
            "import math\n(math.pi, [math.e], {'r': 0.5})",
        ],
        check: |o| value_is(o, "(3.142, [2.718], {'r': 0.500})"),
    },
    Idiom {
        name: "ast_node_interactivity = 'all' shows every expression",
        cells: &[
            "from IPython.core.interactiveshell import InteractiveShell\nInteractiveShell.ast_node_interactivity = 'all'",
            "x = 6\nx * 7\nx + 1",
        ],
        check: |o| {
            stdout_has(o, &["42"])?;
            value_is(o, "7")
        },
    },
    Idiom {
        name: "pools sized cpu_count() - 1",
        cells: &[
            "import os\nfrom multiprocessing import Pool\nfrom joblib import Parallel, delayed\nwith Pool(os.cpu_count() - 1) as pool:\n    squares = pool.map(abs, [-1, -2, -3])\nsquares, Parallel(n_jobs=os.cpu_count() - 1)(delayed(abs)(x) for x in [-4, -5])",
        ],
        check: |o| value_is(o, "([1, 2, 3], [4, 5])"),
    },
    Idiom {
        name: "%%bash: no shell",
        cells: &["%%bash\necho hi"],
        check: |o| {
            stderr_has(
                o,
                "there is no shell in this sandbox, so `echo hi` cannot run; use print(...)",
            )
        },
    },
    Idiom {
        name: "%%writefile, then %run",
        cells: &[
            "%%writefile greet.py\ndef greet(name):\n    return 'hi ' + name\nanswer = 42\n",
            "%run greet.py\n(greet('you'), answer)",
        ],
        check: |o| value_is(o, "('hi you', 42)"),
    },
    Idiom {
        name: "%pwd and %cd",
        cells: &[
            "import os\nos.makedirs('data', exist_ok=True)\n%cd data\nhere = %pwd\n(here, os.getcwd())",
        ],
        check: |o| {
            stdout_has(o, &["/data\n"])?;
            value_is(o, "('/data', '/data')")
        },
    },
    Idiom {
        name: "display(Markdown(...))",
        cells: &[
            "from IPython.display import display, Markdown\ndisplay(Markdown('# Report'))\nprint('next')",
        ],
        check: |o| stdout_has(o, &["# Report\nnext\n"]),
    },
    Idiom {
        name: "HTML as the last value",
        cells: &["from IPython.display import HTML\nHTML('<b>bold</b>')"],
        check: |o| value_is(o, "<b>bold</b>"),
    },
    Idiom {
        name: "display(Image(filename=...)) of a saved figure",
        cells: &[
            "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.savefig('p.png'); plt.close()\nfrom IPython.display import Image, display\ndisplay(Image(filename='p.png'))",
        ],
        check: |o| {
            clean(o)?;
            expect(o.images() == ["image/png"], || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "Image(data=...) as the last value",
        cells: &[concat!(
            "from IPython.display import Image\nImage(data=bytes.fromhex('",
            "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082",
            "'))"
        )],
        check: |o| {
            clean(o)?;
            expect(o.images() == ["image/png"], || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "display(SVG(...))",
        cells: &[
            "from IPython.display import SVG, display\ndisplay(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"20\" height=\"20\"><circle cx=\"10\" cy=\"10\" r=\"9\"/></svg>'))",
        ],
        check: |o| {
            clean(o)?;
            expect(o.images() == ["image/svg+xml"], || {
                format!("{:?}", o.images())
            })
        },
    },
    Idiom {
        name: "display(JSON(...))",
        cells: &["from IPython.display import JSON, display\ndisplay(JSON({'a': [1, 2]}))"],
        check: |o| stdout_has(o, &["\"a\": [\n"]),
    },
    Idiom {
        name: "clear_output in a loop leaves the last figure",
        cells: &[
            "from IPython.display import clear_output, display\nimport matplotlib.pyplot as plt\nfor i in range(3):\n    clear_output(wait=True)\n    fig, ax = plt.subplots(); ax.plot([0, i]); display(fig); plt.close(fig)\nprint('done')",
        ],
        check: |o| {
            stdout_has(o, &["done"])?;
            expect(o.images().len() == 1, || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "clear_output(wait=True) in a loop of prints leaves the last round",
        cells: &[
            "from IPython.display import clear_output\nimport sys\nfor i in range(5):\n    clear_output(wait=True)\n    print(f'step {i} of 5')\n    print(f'warning {i}', file=sys.stderr)",
        ],
        check: |o| {
            stdout_is(o, "step 4 of 5\n")?;
            expect(o.stderr() == "warning 4\n", || o.stderr().to_owned())
        },
    },
    Idiom {
        name: "clear_output() clears at once, and a waiting clear with nothing after clears nothing",
        cells: &[
            "from IPython.display import clear_output\nprint('gone')\nclear_output()\nprint('shown')\nprint('kept')\nclear_output(wait=True)",
        ],
        check: |o| stdout_is(o, "shown\nkept\n"),
    },
    Idiom {
        name: "a training loop that clears, prints and plots ends with its last epoch",
        cells: &[
            "from IPython.display import clear_output\nimport matplotlib.pyplot as plt\nlosses = []\nfor epoch in range(4):\n    losses.append(1 / (epoch + 1))\n    clear_output(wait=True)\n    print(f'epoch {epoch}: loss {losses[-1]:.3f}')\n    plt.plot(losses)\n    plt.show()",
        ],
        check: |o| {
            stdout_is(o, "epoch 3: loss 0.250\n[Image 1]\n")?;
            expect(o.images().len() == 1, || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "a waiting clear_output clears before the cell's value and error",
        cells: &[
            "from IPython.display import clear_output\nprint('old')\nclear_output(wait=True)\n6 * 7",
        ],
        check: |o| {
            value_is(o, "42")?;
            expect(o.stdout().is_empty(), || o.stdout().to_owned())
        },
    },
    Idiom {
        name: "a list longer than a line is laid out one item per line, as IPython shows it",
        cells: &[
            "import pandas as pd\ndf = pd.DataFrame(columns=['alpha_column_name', 'beta_column_name', 'gamma_column_name', 'delta_column_name'])\ndf.columns.tolist()",
        ],
        check: |o| {
            value_is(
                o,
                "['alpha_column_name',\n 'beta_column_name',\n 'gamma_column_name',\n 'delta_column_name']",
            )
        },
    },
    Idiom {
        name: "a dict of results breaks at its own items and keeps short inner values on one line",
        cells: &[
            "{'model': 'ridge', 'scores': [0.91, 0.93, 0.9, 0.92, 0.94, 0.95, 0.9, 0.91, 0.93, 0.92], 'params': {'alpha': 1.0}}",
        ],
        check: |o| {
            value_is(
                o,
                "{'model': 'ridge',\n 'scores': [0.91, 0.93, 0.9, 0.92, 0.94, 0.95, 0.9, 0.91, 0.93, 0.92],\n 'params': {'alpha': 1.0}}",
            )
        },
    },
    Idiom {
        name: "functions and classes as values read as IPython shows them",
        cells: &[
            "def area(width, height=1.0):\n    return width * height\nclass Point:\n    pass\n(area, Point, len)",
        ],
        check: |o| {
            value_is(
                o,
                "(<function __main__.area(width, height=1.0)>,\n __main__.Point,\n <function len(obj, /)>)",
            )
        },
    },
    Idiom {
        name: "collections and exceptions as values read as IPython shows them",
        cells: &[
            "{3, 'a', 1}",
            "from collections import Counter, defaultdict\nclass ShapeError(Exception):\n    pass\n(Counter('abracadabra'), defaultdict(list, {'a': [1]}), ShapeError('expected 3 columns'))",
        ],
        check: |o| {
            value_is(
                o,
                "(Counter({'a': 5, 'b': 2, 'r': 2, 'c': 1, 'd': 1}),\n defaultdict(list, {'a': [1]}),\n __main__.ShapeError('expected 3 columns'))",
            )
        },
    },
    Idiom {
        name: "a set that cannot be sorted shows its items sorted by their text, as IPython does",
        cells: &["{3, 'a', 1}"],
        check: |o| value_is(o, "{1, 3, 'a'}"),
    },
    Idiom {
        name: "a value too large to lay out in good time is shown by its repr, cut to the limit",
        cells: &["grid = [[list(range(5))] * 1000] * 1000\ngrid"],
        check: |o| {
            clean(o)?;
            expect(
                o.value().starts_with("[[[0, 1, 2, 3, 4], [0, 1, 2, 3, 4],"),
                || o.value().chars().take(200).collect(),
            )
        },
    },
    Idiom {
        name: "IPython.lib.pretty gives the text values are shown with",
        cells: &[
            "from IPython.lib.pretty import pretty, pprint\npprint(set(range(5, 0, -1)))\npretty(list(range(30)), max_width=40).count('\\n')",
        ],
        check: |o| {
            value_is(o, "29")?;
            stdout_is(o, "{1, 2, 3, 4, 5}\n")
        },
    },
    Idiom {
        name: "regular expressions, os.environ and mappingproxies as values read as IPython shows them",
        cells: &[
            "import os, re, types\nos.environ['GREETING'] = 'a greeting long enough to need a line of its own'\nenv = {k: os.environ[k] for k in ['GREETING']}\n(re.compile(r'\\d+', re.I), types.MappingProxyType(env), os.environ['GREETING'])",
        ],
        check: |o| {
            value_is(
                o,
                "(re.compile(r'\\d+', re.IGNORECASE|re.UNICODE),\n mappingproxy({'GREETING': 'a greeting long enough to need a line of its own'}),\n 'a greeting long enough to need a line of its own')",
            )
        },
    },
    Idiom {
        name: "a printer registered with IPython.lib.pretty.for_type shows values and items",
        cells: &[
            "from IPython.lib import pretty\nclass Money:\n    def __init__(self, cents):\n        self.cents = cents\npretty.for_type(Money, lambda m, p, cycle: p.text(f'${m.cents / 100:.2f}'))\npretty.for_type(int, lambda n, p, cycle: p.text(f'{n:,}'))",
            "[Money(1999), 1234567]",
        ],
        check: |o| value_is(o, "[$19.99, 1,234,567]"),
    },
    Idiom {
        name: "a printer that raises in display() shows its traceback and the cell goes on",
        cells: &[
            "from IPython.lib import pretty\nclass Model:\n    pass\ndef show(model, p, cycle):\n    raise ValueError('no summary yet')\npretty.for_type(Model, show)\ndisplay(Model())\nprint('trained')\n[None, True, ...]",
        ],
        check: |o| {
            stdout_is(o, "trained\n")?;
            expect(
                o.stderr().contains("ValueError: no summary yet") && o.stderr().contains("in show"),
                || o.stderr().to_owned(),
            )?;
            value_is(o, "[None, True, Ellipsis]")
        },
    },
    Idiom {
        name: "a waiting clear_output is set off by text written straight to the descriptor",
        cells: &[
            "from IPython.display import clear_output\nimport os\nprint('old')\nclear_output(wait=True)\n_ = os.write(1, b'via fd\\n')",
        ],
        check: |o| stdout_is(o, "via fd\n"),
    },
    Idiom {
        name: "clear_output in a !python program clears the terminal's line, not the cell",
        cells: &[
            "print('keep')\n!python -c \"from IPython.display import clear_output; print('child 1'); clear_output(); print('child 2')\"",
        ],
        check: |o| stdout_is(o, "keep\nchild 1\nchild 2\n"),
    },
    Idiom {
        name: "%config InlineBackend.figure_format = 'retina' draws figures at twice the resolution",
        cells: &[
            "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(4, 3), dpi=100)\nax.plot([1, 2, 3])\nplt.show()",
            "%config InlineBackend.figure_format = 'retina'\nfig, ax = plt.subplots(figsize=(4, 3), dpi=100)\nax.plot([1, 2, 3])\nplt.show()",
        ],
        check: |o| {
            clean(o)?;
            let widths = o.png_widths();
            expect(widths.len() == 1 && widths[0] >= 700, || {
                format!("{widths:?}")
            })
        },
    },
    Idiom {
        name: "set_matplotlib_formats('svg') says figures come back as PNG",
        cells: &[
            "from matplotlib_inline.backend_inline import set_matplotlib_formats\nset_matplotlib_formats('svg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()",
        ],
        check: |o| {
            stdout_has(o, &["come back as PNG"])?;
            expect(o.images() == ["image/png"], || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "get_ipython().run_line_magic",
        cells: &[
            "ip = get_ipython()\nip.run_line_magic('matplotlib', 'inline')\nip.run_line_magic('pwd', '')",
        ],
        check: |o| value_is(o, "'/'"),
    },
    Idiom {
        name: "get_ipython().system",
        cells: &["get_ipython().system('nvidia-smi')"],
        check: |o| {
            stderr_has(
                o,
                "`nvidia-smi` cannot run; use nothing: the sandbox has no GPU",
            )
        },
    },
    Idiom {
        name: "obj? help",
        cells: &["len?"],
        check: |o| {
            stdout_has(
                o,
                &[
                    "Signature: len(obj, /)\nDocstring: Return the number of items in a container.\n",
                    "Type:      builtin_function_or_method",
                ],
            )
        },
    },
    Idiom {
        name: "%lsmagic",
        cells: &["%lsmagic"],
        check: |o| {
            clean(o)?;
            expect(
                o.value().contains("%timeit") && o.value().contains("%%capture"),
                || o.value().to_owned(),
            )
        },
    },
    Idiom {
        name: "a magic inside a loop body",
        cells: &["for i in range(2):\n    %time x = i\nx"],
        check: |o| value_is(o, "1"),
    },
    Idiom {
        name: "an error after a magic names its own line",
        cells: &["x = 1\n%time y = 2\nraise ValueError('boom')"],
        check: |o| {
            expect(o.error() == "ValueError", || o.error_text())?;
            expect(
                o.error_text().contains("line 3")
                    && o.error_text().contains("raise ValueError('boom')"),
                || o.error_text(),
            )
        },
    },
    Idiom {
        name: "an error inside %%time names the cell's line",
        cells: &["%%time\na = 1\nb = 1 / 0"],
        check: |o| {
            expect(o.error() == "ZeroDivisionError", || o.error_text())?;
            expect(
                o.error_text().contains("line 3") && o.error_text().contains("b = 1 / 0"),
                || o.error_text(),
            )
        },
    },
    Idiom {
        name: "ThreadPoolExecutor().map",
        cells: &[
            "from concurrent.futures import ThreadPoolExecutor\nwith ThreadPoolExecutor(max_workers=4) as ex:\n    out = list(ex.map(lambda x: x * x, range(6)))\nout",
        ],
        check: |o| value_is(o, "[0, 1, 4, 9, 16, 25]"),
    },
    Idiom {
        name: "ThreadPoolExecutor submit and as_completed",
        cells: &[
            "from concurrent.futures import ThreadPoolExecutor, as_completed\nwith ThreadPoolExecutor() as ex:\n    futures = {ex.submit(pow, 2, n): n for n in range(5)}\n    got = sorted((futures[f], f.result()) for f in as_completed(futures))\ngot",
        ],
        check: |o| value_is(o, "[(0, 1), (1, 2), (2, 4), (3, 8), (4, 16)]"),
    },
    Idiom {
        name: "threading.Thread start and join",
        cells: &[
            "import threading\nresults = {}\ndef work(n):\n    results[n] = sum(range(n))\nthreads = [threading.Thread(target=work, args=(n,)) for n in (10, 100, 1000)]\nfor t in threads: t.start()\nfor t in threads: t.join()\nsorted(results.items())",
        ],
        check: |o| value_is(o, "[(10, 45), (100, 4950), (1000, 499500)]"),
    },
    Idiom {
        name: "a consumer thread and a queue",
        cells: &[
            "import threading, queue\nq, seen = queue.Queue(), []\ndef consume():\n    while (item := q.get()) is not None:\n        seen.append(item * 10)\nworker = threading.Thread(target=consume)\nworker.start()\nfor i in range(4):\n    q.put(i)\nq.put(None)\nworker.join()\nseen",
        ],
        check: |o| value_is(o, "[0, 10, 20, 30]"),
    },
    Idiom {
        name: "waiting on an event nothing can set fails at once",
        cells: &["import threading\nthreading.Event().wait()"],
        check: |o| {
            expect(o.error() == "NeedsAnotherThread", || o.error_text())?;
            expect(
                o.error_text()
                    .contains("would wait forever for an event to be set"),
                || o.error_text(),
            )
        },
    },
    Idiom {
        name: "asyncio.to_thread",
        cells: &[
            "import asyncio\nawait asyncio.gather(asyncio.to_thread(sum, [1, 2]), asyncio.to_thread(max, [3, 4]))",
        ],
        check: |o| value_is(o, "[3, 4]"),
    },
    Idiom {
        name: "multiprocessing.Pool.map",
        cells: &[
            "from multiprocessing import Pool\nwith Pool(4) as pool:\n    doubled = pool.map(abs, [-1, -2, 3])\ndoubled",
        ],
        check: |o| value_is(o, "[1, 2, 3]"),
    },
    Idiom {
        name: "os.getuid, pwd and getpass",
        cells: &[
            "import os, pwd, getpass\n(os.getuid(), os.geteuid(), pwd.getpwuid(os.getuid()).pw_name, getpass.getuser())",
        ],
        check: |o| value_is(o, "(1000, 1000, 'user', 'user')"),
    },
    Idiom {
        name: "ssl and http.client import complete",
        cells: &[
            "import ssl, http.client\nctx = ssl.create_default_context()\n(ctx.verify_mode == ssl.CERT_REQUIRED, ctx.check_hostname, hasattr(http.client, 'HTTPSConnection'))",
        ],
        check: |o| value_is(o, "(True, True, True)"),
    },
    Idiom {
        name: "import black and format code",
        cells: &[
            "%pip install -q black\nimport black\nblack.format_str('x=[1,2 ,3]', mode=black.Mode())",
        ],
        check: |o| value_is(o, "'x = [1, 2, 3]\\n'"),
    },
    Idiom {
        name: "import nltk and tokenize",
        cells: &[
            "%pip install -q nltk\nfrom nltk.tokenize import wordpunct_tokenize\nwordpunct_tokenize('Hello, world!')",
        ],
        check: |o| value_is(o, "['Hello', ',', 'world', '!']"),
    },
    Idiom {
        name: "from tqdm.notebook import tqdm",
        cells: &[
            "from tqdm.notebook import tqdm\ntotal = 0\nfor i in tqdm(range(5)):\n    total += i\ntotal",
        ],
        check: |o| value_is(o, "10"),
    },
    Idiom {
        name: "sympy expressions show as text",
        cells: &["import sympy as sp\nx = sp.Symbol('x')\nsp.expand((x + 1) ** 2)"],
        check: |o| value_is(o, "x**2 + 2*x + 1"),
    },
    // What already worked, and must keep working.
    Idiom {
        name: "display(df)",
        cells: &["import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': [3, 4]})\ndisplay(df)"],
        check: |o| stdout_has(o, &["   a  b\n0  1  3\n1  2  4\n"]),
    },
    Idiom {
        name: "a DataFrame as the last value",
        cells: &["import pandas as pd\npd.DataFrame({'a': [1, 2]})"],
        check: |o| value_is(o, "   a\n0  1\n1  2"),
    },
    Idiom {
        name: "several plt.show() figures",
        cells: &[
            "import matplotlib.pyplot as plt\nfor k in (1, 2):\n    plt.plot([0, k])\n    plt.show()",
        ],
        check: |o| {
            clean(o)?;
            expect(o.images() == ["image/png", "image/png"], || {
                format!("{:?}", o.images())
            })
        },
    },
    Idiom {
        name: "df.plot() without show",
        cells: &["import pandas as pd\npd.DataFrame({'y': [3, 1, 2]}).plot();"],
        check: |o| {
            clean(o)?;
            expect(o.images().len() == 1, || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "display_html(raw=True) and IPython's pretty printer",
        cells: &[
            "from IPython.display import display_html, Pretty, display\ndisplay_html('<b>bold</b>', raw=True)\ndisplay(Pretty('pretty text'))\nclass Point:\n    def _repr_pretty_(self, p, cycle):\n        p.text('Point(1, 2)')\nPoint()",
        ],
        check: |o| {
            stdout_has(o, &["<b>bold</b>", "pretty text"])?;
            value_is(o, "Point(1, 2)")
        },
    },
    Idiom {
        name: "a plotly figure says what it holds and what gives an image",
        cells: &[
            "%pip install -q plotly",
            "import plotly.express as px\nfig = px.bar(x=['a', 'b'], y=[1, 2], title='Sales')\nfig.show()\nfig",
        ],
        check: |o| {
            clean(o)?;
            stdout_has(o, &["<plotly Figure 'Sales': 1 bar>", "matplotlib"])?;
            expect(o.value().starts_with("<plotly Figure 'Sales'"), || {
                o.value().to_owned()
            })
        },
    },
    Idiom {
        name: "seaborn",
        cells: &[
            "import seaborn as sns, pandas as pd\nsns.barplot(data=pd.DataFrame({'k': ['a', 'b'], 'v': [1, 2]}), x='k', y='v');",
        ],
        check: |o| {
            clean(o)?;
            expect(o.images().len() == 1, || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "joblib and sklearn n_jobs",
        cells: &[
            "from joblib import Parallel, delayed\nfrom sklearn.ensemble import RandomForestClassifier\nsquares = Parallel(n_jobs=2)(delayed(pow)(i, 2) for i in range(4))\nclf = RandomForestClassifier(n_estimators=5, n_jobs=-1, random_state=0).fit([[0], [1], [2], [3]], [0, 0, 1, 1])\n(squares, clf.predict([[3]]).tolist())",
        ],
        check: |o| value_is(o, "([0, 1, 4, 9], [1])"),
    },
    Idiom {
        name: "tqdm",
        cells: &["from tqdm import tqdm\nfor _ in tqdm(range(3)):\n    pass"],
        check: |o| stderr_has(o, "3/3"),
    },
    Idiom {
        name: "top-level await",
        cells: &["import asyncio\nawait asyncio.sleep(0.01)\n'slept'"],
        check: |o| value_is(o, "'slept'"),
    },
    Idiom {
        name: "input() is refused clearly",
        cells: &["input('name? ')"],
        check: |o| {
            expect(o.error() == "EOFError", || o.error_text())?;
            expect(o.error_text().contains("cannot ask questions"), || {
                o.error_text()
            })
        },
    },
    Idiom {
        name: "input() reads what the code put in sys.stdin",
        cells: &["import io, sys\nsys.stdin = io.StringIO('Ada\\n')\ninput('name? ')"],
        check: |o| value_is(o, "'Ada'"),
    },
    Idiom {
        name: "signal.alarm() says no timer can interrupt the code",
        cells: &["import signal\nhasattr(signal, 'alarm')", "signal.alarm(5)"],
        check: |o| {
            expect(o.error() == "AttributeError", || o.error_text())?;
            expect(o.error_text().contains("timeout_seconds"), || {
                o.error_text()
            })
        },
    },
    Idiom {
        name: "!python script.py runs the script as a fresh program would",
        cells: &[
            "%%writefile train.py\nimport sys\nprint('training with', sys.argv[1:], __name__)\nif '--fail' in sys.argv:\n    raise ValueError('diverged')",
            "!python train.py --epochs 3\n!python3 train.py --fail\nstatus = _exit_code\nout = !python -c \"print(6 * 7)\"\n(status, out)",
        ],
        check: |o| {
            stdout_has(o, &["training with ['--epochs', '3'] __main__"])?;
            stderr_has(o, "ValueError: diverged")?;
            value_is(o, "(1, ['42'])")
        },
    },
    Idiom {
        name: "a misbehaving !python program leaves the notebook as it was",
        cells: &[
            "import os, sys\nhome = os.getcwd()\n!python -c \"import sys, os; sys.path = None; os.chdir('/tmp'); sys.stdout.close()\"\n!python -c \"import os; os._exit(3)\"\nafter_exit = _exit_code\n!python -c \"raise KeyboardInterrupt\"\nprint('still printing')\n(type(sys.path).__name__, os.getcwd() == home, after_exit, _exit_code)",
        ],
        check: |o| {
            stdout_has(o, &["still printing"])?;
            value_is(o, "('list', True, 3, 130)")
        },
    },
    Idiom {
        name: "%%script python and %%python run the cell as a program, as IPython does",
        cells: &[
            "%%script python --out said --err complained\nimport sys\nprint('args', sys.argv, __name__)\nprint('careful', file=sys.stderr)",
            "%%python3 --no-raise-error\nimport os; os.chdir('/tmp'); raise SystemExit(4)",
            "import os, subprocess\ntry:\n    get_ipython().run_cell_magic('python', '', 'print(\"last words\")\\nraise SystemExit(3)')\nexcept subprocess.CalledProcessError as e:\n    failed = e.returncode\n(said, complained, os.getcwd(), failed)",
        ],
        check: |o| {
            stdout_has(o, &["last words"])?;
            value_is(o, "(\"args [''] __main__\\n\", 'careful\\n', '/', 3)")
        },
    },
    Idiom {
        name: "%store keeps a variable and %store -r brings it back",
        cells: &[
            "import pandas as pd\nprices = pd.Series([1.5, 2.5])\nnames = ['a', 'b']\n%store prices names",
            "del prices, names\n%store -r\n%store\n(prices.sum(), names)",
        ],
        check: |o| {
            stdout_has(
                o,
                &[
                    "Stored variables and their in-db values:",
                    "names  -> ['a', 'b']",
                ],
            )?;
            value_is(o, "(np.float64(4.0), ['a', 'b'])")
        },
    },
    Idiom {
        name: "%xmode says the mode it takes",
        cells: &["%xmode Minimal\n%xmode"],
        check: |o| {
            stdout_has(
                o,
                &[
                    "Exception reporting mode: Minimal",
                    "Exception reporting mode: Docs",
                ],
            )
        },
    },
    Idiom {
        name: "%run of a script ending sys.exit(main()) is quiet; a non-zero status says so",
        cells: &[
            "%%writefile cli.py\nimport sys\ndef main():\n    print('main ran')\n    return 0\nsteps = 3\nsys.exit(main())",
            "%%writefile failing.py\nimport sys\nreached = True\nsys.exit(2)",
            "%run cli.py\n%run failing.py\n(steps, reached)",
        ],
        check: |o| {
            stdout_has(o, &["main ran"])?;
            stderr_has(
                o,
                "An exception has occurred, use %tb to see the full traceback.\n\nSystemExit: 2",
            )?;
            value_is(o, "(3, True)")
        },
    },
    Idiom {
        name: "%run other.ipynb runs its code cells, magics and all",
        cells: &[
            "import json\ncells = [{'cell_type': 'markdown', 'source': ['# Prep']}, {'cell_type': 'code', 'source': ['rows = [1, 2, 3]\\n', 'total = sum(rows)\\n']}, {'cell_type': 'code', 'source': '%time doubled = total * 2\\ndef report():\\n    return f\"{doubled} from {len(rows)} rows\"'}]\njson.dump({'cells': cells, 'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}, open('prep.ipynb', 'w'))",
            "%run prep.ipynb\nimport inspect\n(report(), inspect.getsource(report).splitlines()[0])",
        ],
        check: |o| {
            stdout_has(o, &["Wall time:"])?;
            value_is(o, "('12 from 3 rows', 'def report():')")
        },
    },
    Idiom {
        name: "tracebacks, inspect.getsource and warnings see the cell's lines, every cell",
        cells: &[
            "import warnings\ndef careful():\n    warnings.warn('check the units')\ncareful()",
            "import inspect, traceback\ndef boom():\n    raise ValueError('bad row')\ntry:\n    boom()\nexcept ValueError:\n    traceback.print_exc()\ncareful()\nprint(inspect.getsource(careful))",
        ],
        check: |o| {
            stderr_has(o, "    raise ValueError('bad row')")?;
            stderr_has(o, "UserWarning: check the units")?;
            stdout_has(o, &["def careful():\n    warnings.warn('check the units')"])
        },
    },
    Idiom {
        name: "%prun takes IPython's options and lists the code's own calls",
        cells: &[
            "def slow(n):\n    return sum(i * i for i in range(n))\n%prun -s cumulative -l 4 slow(10000)\nstats = %prun -q -r slow(10)\ntype(stats).__name__",
        ],
        check: |o| {
            stdout_has(o, &["Ordered by: cumulative time", ":1(slow)"])?;
            expect(!o.stdout().contains("<sandbox "), || {
                format!("the listing shows the sandbox's own frames: {}", o.stdout())
            })?;
            value_is(o, "'Stats'")
        },
    },
    Idiom {
        name: "%autoreload 2 runs the new code of a module the code rewrote",
        cells: &[
            "%load_ext autoreload\n%autoreload 2",
            "%%writefile helpers.py\nclass Point:\n    __slots__ = ('x',)\n    def __init__(self):\n        self.x = 7\ndef scale(x):\n    return x * 2\nclass Model:\n    def name(self):\n        return 'v1'",
            "import helpers\nfrom helpers import scale, Model\nmodel, point = Model(), helpers.Point()\n(scale(5), model.name())",
            "open('helpers.py', 'w').write(\"class Point:\\n    __slots__ = ('x',)\\n    def __init__(self):\\n        self.x = 7\\ndef scale(x):\\n    return x * 100\\nclass Model:\\n    def name(self):\\n        return 'version two'\\n\")",
            "(scale(5), model.name())",
            "open('helpers.py', 'w').write(\"class Point:\\n    __slots__ = ('x',)\\n    def __init__(self):\\n        self.x = 7\\ndef scale(x):\\n    return x * 1000\\nclass Model:\\n    def name(self):\\n        return 'version three'\\n\")",
            "(scale(5), model.name(), isinstance(model, helpers.Model), point.x)",
        ],
        check: |o| value_is(o, "(5000, 'version three', True, 7)"),
    },
    Idiom {
        name: "events, post-mortem state and a missing module's real package",
        cells: &[
            "ip = get_ipython()\nran = []\nip.events.register('post_run_cell', lambda result: ran.append(result.success))",
            "1/0",
            "import sys, pdb\npdb.pm()\ntry:\n    import cv2\nexcept ModuleNotFoundError as e:\n    missing = e\n(ran, type(sys.last_exc).__name__)",
        ],
        check: |o| {
            stderr_has(o, "no post-mortem debugger")?;
            value_is(o, "([True, False], 'ZeroDivisionError')")
        },
    },
    Idiom {
        name: "%%capture keeps a figure instead of showing it, and show() brings it back",
        cells: &[
            "%%capture drawn\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nprint('plotted')",
            "from IPython.utils import io\nwith io.capture_output() as quiet:\n    print('hidden')\n(len(drawn.outputs), drawn.stdout, quiet.stdout)",
        ],
        check: |o| {
            expect(o.images().is_empty(), || {
                format!("a captured figure was shown: {}", text(&o.result))
            })?;
            value_is(o, "(1, 'plotted\\n', 'hidden\\n')")
        },
    },
    Idiom {
        name: "a %%capture'd figure comes back with show()",
        cells: &[
            "%%capture drawn\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
            "drawn.show()",
        ],
        check: |o| {
            clean(o)?;
            expect(o.images().len() == 1, || {
                format!("wanted one image: {}", text(&o.result))
            })
        },
    },
    Idiom {
        name: "a __future__ import holds for later cells, as IPython compiles them",
        cells: &[
            "from __future__ import annotations",
            "def area(shape: Shape) -> float:\n    return 0.0\narea.__annotations__",
        ],
        check: |o| value_is(o, "{'shape': 'Shape', 'return': 'float'}"),
    },
    Idiom {
        name: "a text printer registered for a type shows its values",
        cells: &[
            "class Money:\n    def __init__(self, amount):\n        self.amount = amount\nget_ipython().display_formatter.formatters['text/plain'].for_type(Money, lambda m, p, cycle: p.text(f'${m.amount:,.2f}'))",
            "[Money(1234.5), (Money(2),)]",
        ],
        check: |o| value_is(o, "[$1,234.50, ($2.00,)]"),
    },
    Idiom {
        name: "restarting the kernel after %pip install says there is no need",
        cells: &[
            "%pip install -q humanize\nget_ipython().kernel.do_shutdown(restart=True)\nimport humanize\nhumanize.intword(1_200_000)",
        ],
        check: |o| {
            stdout_has(
                o,
                &["was not restarted: packages %pip installs import at once"],
            )?;
            value_is(o, "'1.2 million'")
        },
    },
    Idiom {
        name: "progress rewritten with carriage returns shows its last state, as a notebook does",
        cells: &[
            "import sys\nfor i in range(1, 201):\n    print(f'\\rprocessed {i}/200', end='')\nprint()\nfor pct in (0, 50, 100):\n    sys.stderr.write(f'\\rdownloading {pct}%')\nprint('done')",
        ],
        check: |o| {
            stdout_has(o, &["processed 200/200\ndone"])?;
            expect(!o.stdout().contains("processed 199/200"), || {
                format!("earlier states kept: {}", o.stdout())
            })?;
            expect(o.stderr() == "downloading 100%", || {
                format!("stderr {:?}", o.stderr())
            })
        },
    },
    Idiom {
        name: "a class a %run script or a %%python cell defines pickles, as in its own process",
        cells: &[
            "%%writefile job.py\nimport pickle\nclass Task:\n    pass\nprint(len(pickle.dumps(Task())) > 0)",
            "%run job.py\nget_ipython().run_cell_magic('python', '', 'import pickle\\nclass Row:\\n    pass\\nprint(\"row pickles\", len(pickle.dumps(Row())) > 0)')",
        ],
        check: |o| stdout_has(o, &["True\nrow pickles True"]),
    },
    Idiom {
        name: "text printed between figures says which figure it stands beside",
        cells: &[
            "import matplotlib.pyplot as plt\nfor name in ('ridge', 'lasso'):\n    print('model', name)\n    plt.figure(); plt.plot([1, 2])\n    plt.show()\n    print('score of', name)",
        ],
        check: |o| {
            stdout_has(
                o,
                &[
                    "model ridge\n[Image 1]\nscore of ridge\nmodel lasso\n[Image 2]\nscore of lasso\n",
                ],
            )?;
            expect(o.images().len() == 2, || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "sys.exit() in a cell reads as IPython shows it",
        cells: &["import sys\nsys.exit(0)"],
        check: |o| {
            let said = o.error_text();
            expect(
                said.contains("An exception has occurred, use %tb to see the full traceback.")
                    && said.contains("SystemExit: 0")
                    && !said.contains("Traceback (most recent call last)"),
                || said.to_string(),
            )
        },
    },
    Idiom {
        name: "a statsmodels coefficient table as the last value shows its rows",
        cells: &[
            "import numpy as np, statsmodels.api as sm\nX = sm.add_constant(np.arange(10.0))\ny = 2 * np.arange(10.0) + np.sin(np.arange(10.0))\nsm.OLS(y, X).fit().summary().tables[1]",
        ],
        check: |o| {
            clean(o)?;
            expect(
                o.value().contains("coef") && o.value().contains("x1"),
                || format!("value {:?}", o.value()),
            )
        },
    },
    Idiom {
        name: "time.tzset() takes UTC and refuses another zone, naming zoneinfo",
        cells: &[
            "import os, time\nos.environ['TZ'] = 'UTC'\ntime.tzset()\nos.environ['TZ'] = 'Europe/Paris'\ntime.tzset()",
        ],
        check: |o| {
            expect(o.error() == "OSError", || o.error_text())?;
            expect(o.error_text().contains("ZoneInfo('Europe/Paris')"), || {
                o.error_text()
            })
        },
    },
    Idiom {
        name: "a standard module WASI leaves out says so",
        cells: &["import resource"],
        check: |o| {
            expect(o.error() == "ModuleNotFoundError", || o.error_text())?;
            expect(
                o.error_text()
                    .contains("Unsupported platform for standard library module"),
                || o.error_text(),
            )
        },
    },
    Idiom {
        name: "sqlite",
        cells: &[
            "import sqlite3\ndb = sqlite3.connect(':memory:')\ndb.execute('create table t (x)')\ndb.executemany('insert into t values (?)', [(1,), (2,)])\ndb.execute('select sum(x) from t').fetchone()",
        ],
        check: |o| value_is(o, "(3,)"),
    },
    Idiom {
        name: "an Excel round trip",
        cells: &[
            "import pandas as pd\npd.DataFrame({'a': [1, 2]}).to_excel('t.xlsx', index=False)\npd.read_excel('t.xlsx')['a'].tolist()",
        ],
        check: |o| value_is(o, "[1, 2]"),
    },
];

#[tokio::test]
async fn notebook_idioms_run_as_written() {
    let index = crate::real_wheels::index().await;
    let server = server(&index.url, &[]).await;
    assert!(CORPUS.len() >= 40, "the corpus has {} idioms", CORPUS.len());
    run_corpus(&server, CORPUS).await;
}
