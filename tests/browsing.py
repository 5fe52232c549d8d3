"""Driving the built website in a real browser: a tab that records JavaScript errors and
requests leaving the site, and axe-core's accessibility check. The fixtures that start
the browser and serve the site are in conftest.py.

Debian's headless `chromium` is driven through the `playwright` package; axe-core's
engine (axe.min.js) comes from the PyPI package axe-playwright-python, a dev dependency:
nothing is downloaded at test time.
"""

from __future__ import annotations

import re
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
            self.external.append(route.request.url)
            route.abort()

        # Only requests that leave the site come to Python (the pattern is matched in the
        # browser's driver): a page's own forty-odd requests go through untouched.
        own = re.escape(f"{urlparse(site_url).scheme}://{host}/") if host else "file:"
        self.context.route(re.compile(f"^(?!{own}|data:|blob:|about:)"), block_external)

    def open(self, url: str):
        self.page.goto(url, wait_until="load")
        self.settle()

    def reset(self, *, width: int = 1280, dark: bool = False):
        """This tab as if it were new (``width`` and ``dark`` as for a new Tab), with no
        errors or requests recorded yet. A new tab costs the browser a process and a cold
        start, about a second of CPU a page; in a tab used again the site's files stay
        cached, as they do for a reader going from page to page."""
        self.page.emulate_media(color_scheme="dark" if dark else "light")
        self.page.set_viewport_size({"width": width, "height": 900})
        self.errors.clear()
        self.external.clear()

    def open_afresh(self, url: str, **kwargs):
        """Open ``url`` in this tab as if it were new (reset: ``width``, ``dark``)."""
        self.reset(**kwargs)
        self.open(url)

    def settle(self):
        """Wait until MathJax (where the page has maths) has finished typesetting, and the
        theme's fades have ended (a page from the cache can be checked while the search
        button still fades into its dark colours)."""
        self.page.wait_for_load_state("load")
        self.page.evaluate(
            "async () => { if (window.MathJax && MathJax.startup && MathJax.startup.promise)"
            " { await MathJax.startup.promise; } }"
        )
        self.end_fades()

    def end_fades(self):
        """Wait until the page's finite animations (the theme's fades) have ended."""
        self.page.evaluate(
            "() => Promise.all(document.getAnimations()"
            ".filter(a => isFinite(a.effect?.getComputedTiming().endTime))"
            ".map(a => a.finished.catch(() => null)))"
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


# The rules whose verdict depends on the colours (the others see the same page in light and
# dark colours). Colour contrast, and a link's contrast with the text around it, also cost
# about a second per run whatever they check (axe lays out the whole page first), and most
# of a lesson's text repeats a few styles. So these two rules run on one sample of each
# contrast style: an element with text of its own, keyed by everything its contrast depends
# on (its colour, font size and weight, text shadow, the opacity of it and its ancestors,
# and every background from it down to the first opaque one; for a link, also its underline
# and border, the colour of the text around it and whether there is text around it). A
# sample is preferably shown and has a letter or digit in it (axe skips hidden text and
# punctuation). Given the styles already checked (on earlier pages of the same site), only
# new ones are checked, and a page that brings none skips the two rules.
COLOUR_RULES = ("color-contrast", "link-in-text-block")
CONTRAST_SAMPLES = r"""(checked) => {
    const done = new Set(checked);
    const style = new Map(), css = el => style.get(el) || style.set(el, getComputedStyle(el)).get(el);
    const text = el => el.textContent.trim();
    const keyOf = el => {
        const s = css(el), backs = [];
        let opacity = 1, opaque = false;
        for (let a = el; a; a = a.parentElement) {
            const t = css(a);
            opacity *= parseFloat(t.opacity);
            if (opaque) continue;
            if (t.backgroundImage !== "none") backs.push(t.backgroundImage);
            if (t.backgroundColor !== "rgba(0, 0, 0, 0)") {
                backs.push(t.backgroundColor);
                opaque = t.backgroundColor.startsWith("rgb(");
            }
        }
        const key = [s.color, s.fontSize, s.fontWeight, s.textShadow, opacity, backs.join(" over ")];
        const up = el.parentElement;
        if (el.tagName === "A" && up) {
            key.push("link", s.textDecorationLine, s.borderBottomStyle, s.borderBottomWidth,
                     css(up).color, text(up).length > text(el).length);
        }
        return key.join("|");
    };
    const own = el => Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
    const rank = el => 2 * (el.getClientRects().length > 0) + /[\p{L}\p{N}]/u.test(el.textContent);
    const sample = new Map();
    for (const el of document.body.querySelectorAll("*")) {
        if (!own(el)) continue;
        const key = keyOf(el);
        if (done.has(key)) continue;
        const had = sample.get(key);
        if (!had || rank(el) > rank(had)) sample.set(key, el);
    }
    window.__contrastSamples = Array.from(sample.values());
    return Array.from(sample.keys());
}"""

AXE_RUN = """async ([context, only, rules]) => {
    const where = context === "samples" ? {include: window.__contrastSamples} : document;
    const result = await axe.run(where, {runOnly: only, rules: rules, resultTypes: ["violations"]});
    return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
        nodes: v.nodes.map(n => n.target.join(" "))}));
}"""


def axe_problems(page, axe_source: str, impacts=("serious", "critical"), rules=None,
                 checked_styles: set | None = None) -> list[str]:
    """axe-core's WCAG 2 A/AA violations of the given impacts on the open page, in its
    current colours, one line each (after COLLAPSE_CODE_TOKENS, which changes the page's
    code blocks: run it after the page's other checks). ``rules``: only these axe rules.
    COLOUR_RULES run on CONTRAST_SAMPLES: on the styles not in ``checked_styles``, a set
    this adds the page's new styles to (None: every style of the page)."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=axe_source)
    page.evaluate(COLLAPSE_CODE_TOKENS)
    sampled = [r for r in COLOUR_RULES if rules is None or r in rules]
    violations = []
    if rules is None or set(rules) - set(sampled):
        only = ({"type": "tag", "values": AXE_TAGS} if rules is None else
                {"type": "rule", "values": [r for r in rules if r not in sampled]})
        violations += page.evaluate(AXE_RUN, ["document", only, {r: {"enabled": False} for r in sampled}])
    if sampled:
        styles = page.evaluate(CONTRAST_SAMPLES, sorted(checked_styles or ()))
        if styles:
            violations += page.evaluate(AXE_RUN, ["samples", {"type": "rule", "values": sampled}, {}])
        if checked_styles is not None:
            checked_styles.update(styles)
    return [
        f"{v['impact']}: {v['id']} ({v['help']}) at {v['nodes'][:4]}"
        for v in violations
        if v["impact"] in impacts
    ]


def readout_of(explorer, i: int, j: int) -> str:
    """Hover cell (i, j) of an attention explorer and return its read-out line."""
    explorer.locator(f'rect[data-i="{i}"][data-j="{j}"]').hover()
    return explorer.locator(".readout").inner_text()
