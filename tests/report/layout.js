// Measures a rendered report the way a reader meets it; run by tests/report/test_report_layout.py through CDP.
// Returns plain data: what overflows the page, which cells are squeezed, and each chart's axes, legend and text.
(() => {
  const page = document.documentElement.clientWidth;
  const root = document.querySelector("main") || document.body;  // the campaign report has no <main>
  const describe = (el) => {
    const cls = typeof el.className === "string" ? el.className : (el.className.baseVal || "");
    const sec = el.closest("section");
    return `${sec ? sec.id : "-"} ${el.tagName.toLowerCase()}.${cls.split(" ").join(".")} "${(el.textContent || "").trim().slice(0, 40)}"`;
  };
  const box = (el) => { const r = el.getBoundingClientRect(); return {x: r.left, y: r.top, w: r.width, h: r.height}; };
  const overflow = [...document.querySelectorAll("main, section, table, figure, svg.chart-svg, ul.legend, pre, dl, p")]
    .filter((el) => { const r = el.getBoundingClientRect(); return r.right > page + 0.5 || r.left < -0.5; })
    .map((el) => `${describe(el)} spans ${Math.round(el.getBoundingClientRect().left)}..${Math.round(el.getBoundingClientRect().right)} of ${page}`);
  const cut = [...document.querySelectorAll("th, td")]
    .filter((c) => c.scrollWidth > c.clientWidth + 1)
    .map((c) => `${describe(c)} needs ${c.scrollWidth}px, has ${c.clientWidth}px`);
  // A cell is squeezed when its text breaks into lines of one or two characters (zh narrow columns did).
  const squeezed = [];
  for (const c of document.querySelectorAll("th, td")) {
    const chars = (c.innerText || "").replace(/\s/g, "").length;
    if (chars < 2) continue;
    const range = document.createRange();
    range.selectNodeContents(c);
    const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top / 4)));
    const lines = tops.size;
    if (lines > 1 && (lines >= chars || (chars >= 4 && chars / lines < 2.5))) {
      squeezed.push(`${describe(c)}: ${chars} characters on ${lines} lines`);
    }
    // A short single word (a stage, a catalogue id, a number) broken in two reads as two words.
    const text = (c.innerText || "").trim();
    if (lines > 1 && !/\s/.test(text) && text.length <= 12 && !/[\u4e00-\u9fff]/.test(text)) {
      squeezed.push(`${describe(c)}: the word "${text}" is broken over ${lines} lines`);
    }
  }
  const overlaps = (a, b) => {
    const w = Math.min(a.x + a.w, b.x + b.w) - Math.max(a.x, b.x);
    const h = Math.min(a.y + a.h, b.y + b.h) - Math.max(a.y, b.y);
    return w > 1 && h > 1;
  };
  const charts = [...document.querySelectorAll("figure.chart")].map((fig) => {
    const svg = fig.querySelector("svg.chart-svg");
    const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    const texts = [...svg.querySelectorAll("text")].filter((t) => t.textContent.trim());
    const boxes = texts.map((t) => ({t: t.textContent.trim(), b: box(t)}));
    const clash = [];
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        if (overlaps(boxes[i].b, boxes[j].b)) clash.push(`"${boxes[i].t}" × "${boxes[j].t}"`);
      }
    }
    const title = (sel) => { const t = svg.querySelector(sel); return t ? {text: t.textContent.trim(), ...box(t)} : null; };
    const sr = svg.getBoundingClientRect();
    const outside = boxes.filter((x) => x.b.x < sr.left - 0.5 || x.b.x + x.b.w > sr.right + 0.5
                                     || x.b.y < sr.top - 0.5 || x.b.y + x.b.h > sr.bottom + 0.5).map((x) => x.t);
    return {
      kind: fig.dataset.chart, section: fig.closest("section").id,
      xTitle: title("text.axis-title.x"), yTitle: title("text.axis-title.y"),
      xTicks: svg.querySelectorAll("text.tick.x").length, yTicks: svg.querySelectorAll("text.tick.y").length,
      lanes: [...svg.querySelectorAll("text.lane-label")].map((t) => t.textContent),
      coreLabels: [...svg.querySelectorAll("text.core-label")].map((t) => t.textContent),
      legend: [...fig.querySelectorAll("ul.legend li")].map((li) => {
        const mark = li.querySelector("svg.swatch rect, svg.swatch circle, svg.swatch path, svg.swatch line");
        return {label: li.textContent.trim(), fill: mark ? (mark.getAttribute("fill") || mark.getAttribute("stroke")) : null,
                visible: li.getBoundingClientRect().width > 0};
      }),
      taskFills: [...new Set([...svg.querySelectorAll("rect.task")].map((r) => r.getAttribute("fill")))],
      minFontPx: Math.min(...texts.map((t) => parseFloat(getComputedStyle(t).fontSize) * scale)),
      clash, outside,
    };
  });
  // Text a reader cannot finish: hidden behind an edge, or ended by an ellipsis with the whole text nowhere on the
  // page (a details element below it, or a title on it or an ancestor).
  const hidden = [...root.querySelectorAll("*")].filter((el) => {
    const cs = getComputedStyle(el);
    return (cs.textOverflow === "ellipsis" || cs.overflowX === "hidden" || cs.overflowX === "clip")
      && el.scrollWidth > el.clientWidth + 1 && (el.innerText || "").trim();
  }).map((el) => `${describe(el)} hides ${el.scrollWidth - el.clientWidth}px of its text`);
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const ellipsis = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const text = n.textContent.trim();
    if (!/(…|\.\.\.)$/.test(text)) continue;
    const el = n.parentElement;
    const whole = el.closest("details") || el.closest("[title]");
    if (!whole) ellipsis.push(`${describe(el)} ends with an ellipsis and the whole text is nowhere`);
  }
  // Markdown that reached the HTML as characters: `code`, **bold**, [^note], [text](link).
  const raw = [];
  for (const el of root.querySelectorAll("li, dd, dt, p, td, th, h1, h2, h3, figcaption, summary")) {
    const text = el.innerText || "";
    const m = text.match(/`[^`\n]+`|\*\*[^*\n]+\*\*|\[\^[\w-]+\]|\]\([^)\s]+\)/);
    if (m) raw.push(`${describe(el)}: ${m[0]}`);
  }
  const links = [...document.querySelectorAll("a.def")].map((a) => a.getAttribute("href"));
  const missing = links.filter((h) => !document.getElementById(h.slice(1)));
  return {
    page, scrollWidth: document.documentElement.scrollWidth, overflow, cut, squeezed, charts, hidden, ellipsis, raw,
    text: root.textContent,
    sections: [...document.querySelectorAll("main > section")].map((s) => s.id),
    definitions: [...document.querySelectorAll("dl.glossary dt")].map((d) => d.id),
    links: links.length, missingTargets: missing,
  };
})()
