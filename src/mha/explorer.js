// The attention explorer's behaviour (mha/explorer.py writes the HTML it acts on).
//
// Each explorer carries a copy of this script inside its own element, so a page or a notebook
// needs nothing else: no library, no network. The script finds its explorer (the element with
// class "attention-explorer" around the script), reads the weights from the JSON script in it,
// and wires up:
//   - hovering or clicking a cell (an SVG rect with data-i and data-j), or moving with the arrow
//     keys, Home and End once the grid has focus: the readout shows "head: query -> key = w";
//   - the head slider, if there is one: it recolours every cell with the selected head's weights.
// The colour scale (data-stops on the explorer: RGB triples at evenly spaced weights, linearly
// interpolated) is the one the Python side used to draw the cells first.
//
// Under Node (the project's tests) nothing touches a page: the script exports its functions.
(function () {
  'use strict';

  function colour(stops, w) {
    var x = Math.min(Math.max(w, 0), 1) * (stops.length - 1);
    var k = Math.min(Math.floor(x), stops.length - 2), t = x - k;
    return 'rgb(' + [0, 1, 2].map(function (c) {
      return Math.round(stops[k][c] + (stops[k + 1][c] - stops[k][c]) * t);
    }).join(',') + ')';
  }

  function readoutText(title, query, key, w) {
    return title + ': ' + query + ' -> ' + key + ' = ' + w.toFixed(4);
  }

  // Moves the cursor (i, j) by (di, dj) and keeps it on the grid of nq rows and nk columns.
  function step(i, j, di, dj, nq, nk) {
    return [Math.min(Math.max(Math.max(i, 0) + di, 0), nq - 1),
            Math.min(Math.max(Math.max(j, 0) + dj, 0), nk - 1)];
  }

  var MOVES = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]};

  function init(root) {
    if (!root || root.getAttribute('data-ready')) return;
    root.setAttribute('data-ready', '1');
    var data = JSON.parse(root.querySelector('script[type="application/json"]').textContent);
    var titles = JSON.parse(root.getAttribute('data-titles'));
    var stops = JSON.parse(root.getAttribute('data-stops'));
    var keys = data.tokens, queries = data.query_tokens || data.tokens, heads = data.heads;
    var nk = keys.length, nq = queries.length, h = 0, ci = -1, cj = -1;
    var grid = root.querySelector('svg.ae-grid'), readout = root.querySelector('.readout');
    var slider = root.querySelector('input[type="range"]'), name = root.querySelector('.ae-head');
    var cursors = grid.querySelectorAll('.ae-cursor'), cells = [];
    grid.querySelectorAll('rect[data-i]').forEach(function (r) {
      cells[+r.getAttribute('data-i') * nk + +r.getAttribute('data-j')] = r;
    });

    function show() {
      if (ci < 0) return;
      var r = cells[ci * nk + cj], x = +r.getAttribute('x'), y = +r.getAttribute('y');
      var s = +r.getAttribute('width');
      cursors.forEach(function (c) { c.setAttribute('d', 'M' + x + ' ' + y + 'h' + s + 'v' + s + 'h' + (-s) + 'z'); });
      readout.textContent = readoutText(titles[h], queries[ci], keys[cj], heads[h][ci][cj]);
    }

    function pick(e) {
      var r = e.target.closest && e.target.closest('rect[data-i]');
      if (!r) return;
      ci = +r.getAttribute('data-i');
      cj = +r.getAttribute('data-j');
      show();
    }

    grid.addEventListener('mouseover', pick);
    grid.addEventListener('click', pick);
    grid.addEventListener('focus', function () {
      if (ci < 0) { ci = 0; cj = 0; }
      show();
    });
    grid.addEventListener('keydown', function (e) {
      var m = MOVES[e.key];
      if (e.key === 'Home') m = [0, -nk];
      if (e.key === 'End') m = [0, nk];
      if (!m) return;
      e.preventDefault();
      var next = step(ci, cj, m[0], m[1], nq, nk);
      ci = next[0];
      cj = next[1];
      show();
    });
    if (slider) {
      slider.addEventListener('input', function () {
        h = +slider.value;
        heads[h].forEach(function (row, i) {
          row.forEach(function (w, j) { cells[i * nk + j].setAttribute('fill', colour(stops, w)); });
        });
        name.textContent = titles[h];
        slider.setAttribute('aria-valuetext', titles[h]);
        show();
      });
    }
  }

  if (typeof document !== 'undefined') {
    var me = document.currentScript;
    var root = me && me.closest('.attention-explorer');
    if (root) {
      init(root);
    } else {
      // No current script (HTML inserted by a front end that runs scripts later): every explorer
      // on the page not yet set up.
      document.querySelectorAll('.attention-explorer:not([data-ready])').forEach(init);
    }
  }
  if (typeof module === 'object' && module.exports) {
    module.exports = {colour: colour, readoutText: readoutText, step: step, init: init};
  }
})();
