"""Driving the built website in a real browser: a tab that records JavaScript errors and
requests leaving the site, and axe-core's accessibility check. The fixtures that start
the browser and serve the site are in conftest.py.

Debian's headless `chromium` is driven through the `playwright` package; axe-core's
engine (axe.min.js) comes from the PyPI package axe-playwright-python, a dev dependency:
nothing is downloaded at test time.
"""

from __future__ import annotations

from urllib.parse import urlparse

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]


class Tab:
    """A fresh browser tab that records JavaScript errors and requests leaving the site.

    width: the viewport's width in CSS pixels (390: a phone); dark: the reader's system asks
    for dark colours (prefers-color-scheme), as a new visitor with a dark system would.
    """

    def __init__(self, browser, site_url, *, width: int = 1280, dark: bool = False):
        self.context = browser.new_context(
            viewport={"width": width, "height": 900}, color_scheme="dark" if dark else "light"
        )
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.external: list[str] = []
        host = urlparse(site_url).netloc
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on(
            "console",
            lambda msg: msg.type == "error" and self.errors.append(f"console: {msg.text}"),
        )

        def block_external(route):
            if urlparse(route.request.url).netloc not in (host, ""):
                self.external.append(route.request.url)
                route.abort()
            else:
                route.continue_()

        self.context.route("**/*", block_external)

    def open(self, url: str):
        self.page.goto(url, wait_until="load")
        self.settle()

    def settle(self):
        """Wait until MathJax (where the page has maths) has finished typesetting."""
        self.page.wait_for_load_state("load")
        self.page.evaluate(
            "async () => { if (window.MathJax && MathJax.startup && MathJax.startup.promise)"
            " { await MathJax.startup.promise; } }"
        )

    def close(self):
        self.context.close()


# --- accessibility: axe-core ----------------------------------------------------------------
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]

# Colour contrast is axe's slow rule: it works out the background behind every element
# with text (about 1 ms each), and a lesson's highlighted code holds thousands of token
# spans, which carry nothing but a colour. So before axe runs, the spans of the code keep
# one of each kind and the others become plain text of their line. A kind is what the
# contrast depends on (colour, font, opacity, shadow and the background behind), in light
# and in dark colours, and its sample has a letter or digit in it where the kind has one
# (axe skips punctuation). Every rule still sees every kind of token, every pairing of a
# token colour with a code background is checked in both modes, and a lesson checks in a
# fifth of the time.
COLLAPSE_CODE_TOKENS = r"""() => {
    const root = document.documentElement, mode = root.dataset.theme;
    const behind = el => {
        for (; el; el = el.parentElement) {
            const bg = getComputedStyle(el).backgroundColor;
            if (bg !== "rgba(0, 0, 0, 0)" && bg !== "transparent") return bg;
        }
        return "none";
    };
    const spans = Array.from(document.querySelectorAll(".highlight pre span"))
        .filter(span => !span.children.length);
    const keys = spans.map(() => "");
    for (const theme of ["light", "dark"]) {
        root.dataset.theme = theme;  // what the theme itself does when the mode changes
        spans.forEach((span, k) => {
            const s = getComputedStyle(span);
            keys[k] += [s.color, s.fontSize, s.fontWeight, s.fontStyle, s.opacity, s.textShadow,
                        s.backgroundColor, behind(span.parentElement)].join("|") + "/";
        });
    }
    root.dataset.theme = mode;
    const checked = span => /[\p{L}\p{N}]/u.test(span.textContent);
    const sample = new Map();
    spans.forEach((span, k) => {
        const had = sample.get(keys[k]);
        if (!had || (!checked(had) && checked(span))) sample.set(keys[k], span);
    });
    const keep = new Set(sample.values());
    const merged = spans.filter(span => !keep.has(span));
    for (const span of merged) span.replaceWith(span.textContent);  // after reading every style
    return [keep.size, merged.length];
}"""


def axe_problems(page, axe_source: str, impacts=("serious", "critical"), rules=None) -> list[str]:
    """axe-core's WCAG 2 A/AA violations of the given impacts on the open page, in its
    current colours, one line each (after COLLAPSE_CODE_TOKENS, which changes the page's
    code blocks: run it after the page's other checks). ``rules``: only these axe rules."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=axe_source)
    page.evaluate(COLLAPSE_CODE_TOKENS)
    only = {"type": "rule", "values": list(rules)} if rules else {"type": "tag", "values": AXE_TAGS}
    violations = page.evaluate(
        """async (only) => {
            const result = await axe.run(document, {runOnly: only, resultTypes: ["violations"]});
            return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map(n => n.target.join(" "))}));
        }""",
        only,
    )
    return [
        f"{v['impact']}: {v['id']} ({v['help']}) at {v['nodes'][:4]}"
        for v in violations
        if v["impact"] in impacts
    ]


def readout_of(explorer, i: int, j: int) -> str:
    """Hover cell (i, j) of an attention explorer and return its read-out line."""
    explorer.locator(f'rect[data-i="{i}"][data-j="{j}"]').hover()
    return explorer.locator(".readout").inner_text()
