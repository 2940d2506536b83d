//! Corpus idioms: what a cell shows: `IPython.display` objects,
//! `clear_output`, values laid out as IPython's pretty printer lays them out,
//! figure formats.

use super::*;

/// The idioms of this part of the corpus.
pub const IDIOMS: &[Idiom] = &[
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
];
