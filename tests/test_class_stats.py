"""The class report's numbers (mha.grading.classstats), its figures, its roster and the
merging of grades, on made-up grades documents: no grading, no HTML."""

from __future__ import annotations

import html
import re

import pytest

from mha.grading import classstats, figures, grades, roster
from mha.grading.classstats import build, correlation, quintiles


def answer(exercise_id: str, score: float, points: float = 3.0, *, status: str = "graded", mistake: str | None = None,
           diagnosis: str | None = None, code: str = "", checks: int = 3) -> dict:
    passed = round(score / points * checks)
    wrong = "mistake" if mistake else "diagnosis" if diagnosis else "wrong"
    out = [{"name": f"public check {k + 1}", "passed": k < passed, "hidden": False,
            "message": "correct" if k < passed else ("wrong values" + (f". Hint: {diagnosis}" if diagnosis else "")),
            "kind": "correct" if k < passed else wrong, "hint": "" if k < passed else diagnosis or "",
            "mistake": None if k < passed else mistake}
           for k in range(checks)] if status == "graded" else []
    return {"id": exercise_id, "title": exercise_id, "function": "f", "score": score, "max_score": points,
            "status": status, "message": "", "checks": out, "seconds": 0.01, "code": code}


def document(students: dict[str, list[dict]], exercises=None, seed: str = "s") -> dict:
    """A grades document: student -> their answers; exercises: (id, lesson, mistakes)."""
    ids = list(dict.fromkeys(a["id"] for answers in students.values() for a in answers))
    exercises = exercises or [(i, "lesson", []) for i in ids]
    return {"format": grades.FORMAT, "version": grades.VERSION, "graded": "today", "pseudonym_seed": seed,
            "exercises": [{"id": i, "title": i, "lesson": lesson, "function": "f", "points": 3.0, "notes": {},
                           "mistakes": mistakes, "diagnosis": {"section": "01-one-head#a", "taught": "lesson 01: A"}}
                          for i, lesson, mistakes in exercises],
            "submissions": [{"student": name, "path": f"class/{name}", "source": f"/class/{name}", "files": ["x.py"],
                             "score": sum(a["score"] for a in answers), "max_score": 3.0 * len(answers),
                             "exercises": answers, "notes": [], "seconds": 0.1}
                            for name, answers in students.items()]}


def mistake(key: str, hint: str = "a hint", name: str = "", section: str = "01-one-head#why") -> dict:
    return {"key": key, "name": name, "hint": hint, "section": section, "taught": f"lesson 01: {section}"}


def report_of(scores: dict[str, list[float]]) -> classstats.ClassReport:
    """A class report from made-up scores: exercise id -> one score per student (3 points each)."""
    n = len(next(iter(scores.values())))
    return build(document({f"s{k}": [answer(i, s[k]) for i, s in scores.items()] for k in range(n)}))


# ----------------------------------------------------------------------------- item statistics

def test_item_statistics_flag_what_everyone_gets_and_what_does_not_discriminate():
    ability = [0, 0, 1, 1, 2, 2, 3, 3, 3, 3]
    follows, also = [min(3, a) for a in ability], [3 * (a >= 2) for a in ability]  # the better students score higher
    stats = {e.id: e for e in report_of({"follows": follows, "also": also, "everyone": [3] * 9 + [0]}).exercises}
    assert stats["follows"].discrimination > 0.6 and stats["follows"].flags == []
    assert stats["everyone"].flags == ["nearly everyone gets it", "does not discriminate"]
    assert stats["everyone"].difficulty == pytest.approx(0.9)
    against = report_of({"follows": follows, "also": also, "against": [3 - a for a in ability]}).exercises[2]
    assert against.discrimination < -0.8 and against.flags == ["does not discriminate"]


def test_correlation():
    assert correlation([1, 2, 3], [2, 4, 7]) == pytest.approx(0.9933, abs=1e-4)
    assert correlation([1, 2, 3], [3, 2, 1]) == pytest.approx(-1)
    assert correlation([1, 1, 1], [1, 2, 3]) is None
    assert correlation([1, 2], [1, 2]) is None


def test_quintiles_are_the_mean_scores_of_each_fifth_of_the_class_weakest_first():
    scores = [0, 0, 1, 1, 2, 2, 3, 3, 3, 3]
    assert quintiles(scores, scores, 3) == pytest.approx([0, 1 / 3, 2 / 3, 1, 1])
    totals = [9, 8, 7, 6, 5, 4, 3]  # seven students: fifths of 2, 2, 1, 1, 1
    assert quintiles([3, 3, 0, 0, 3, 0, 0], totals, 3) == pytest.approx([0, 0.5, 0, 1, 1])
    assert quintiles([1, 2], [1, 2], 3) == [None] * 5
    e = report_of({"a": [0, 0, 1, 1, 2, 2, 3, 3, 3, 3], "b": [0, 0, 0, 0, 0, 3, 3, 3, 3, 3]}).exercises[0]
    assert e.quintiles[0] < e.quintiles[-1]


# ----------------------------------------------------------------------------- what to teach again

def test_what_to_teach_again_ranks_mistakes_and_diagnoses_together_and_shows_the_ties_at_the_cut():
    made_by = [7, 6, 5, 4, 3, 3, 3, 3, 2, 2, 2, 2]  # exercise e<k>'s mistake: made by the first n students
    students = {f"s{s}": [answer(f"e{k}", 1.0, mistake="m") if s < n else answer(f"e{k}", 3.0)
                          for k, n in enumerate(made_by)] for s in range(8)}
    for s in range(1, 8):  # and seven got the hint of an exercise's own diagnosis
        students[f"s{s}"].append(answer("diag", 1.0, diagnosis="x may arrive non-contiguous"))
    students["s0"].append(answer("diag", 3.0))
    exercises = [(f"e{k}", "lesson", [mistake("m")]) for k in range(12)] + [("diag", "lesson", [])]
    report = build(document(students, exercises))
    teach = [(h.exercise, h.kind, h.students) for h in report.teach]
    assert teach[:3] == [("e0", "mistake", 7), ("diag", "diagnosis", 7), ("e1", "mistake", 6)]
    assert len(report.teach) == classstats.TOP and report.teach[-1].students == 2
    assert [(h.exercise, h.students) for h in report.teach_more] == [("e9", 2), ("e10", 2), ("e11", 2)]
    diag = report.teach[1]
    assert diag.taught.text == "lesson 01: A" and diag.hint == "x may arrive non-contiguous"


def test_where_the_points_are_taught_counts_each_student_once():
    taught = "01-one-head#why"
    exercises = [("e1", "l", [mistake("m", section=taught)]), ("e2", "l", [mistake("m", section=taught)])]
    doc = document({"a": [answer("e1", 1, mistake="m"), answer("e2", 1, mistake="m")],
                    "b": [answer("e1", 1, mistake="m"), answer("e2", 3)], "c": [answer("e1", 3), answer("e2", 3)]},
                   exercises)
    [t] = build(doc).taught
    assert (t.students, t.answers, t.hints) == (2, 3, 2)


def test_a_mistake_is_called_by_its_name_when_the_grades_carry_one():
    exercises = [("e", "l", [mistake("mistake 1", name="overflow"), mistake("mistake 2")])]
    doc = document({"a": [answer("e", 1, mistake="mistake 1")], "b": [answer("e", 1, mistake="mistake 2")]}, exercises)
    labels = {h.key: h.label for h in build(doc).exercises[0].mistakes}
    assert labels == {"mistake 1": "overflow", "mistake 2": "mistake 2"}


def test_a_status_from_a_newer_grader_is_counted_under_its_own_name():
    doc = document({"a": [answer("e", 0, status="error")], "b": [answer("e", 3)]})
    e = build(doc).exercises[0]
    assert e.tally.status["error"] == 1 and ("exercise", "e", "error", 1, "") in classstats.numbers(build(doc))


# ----------------------------------------------------------------------------- answer groups

NAIVE = "import torch\n\ndef f(x):\n    e = torch.exp(x)\n    return e / e.sum(-1, keepdim=True)\n"
NAIVE_RENAMED = "import torch as T\n\ndef f(scores):\n    ex = T.exp(scores)\n    return ex / ex.sum(-1, keepdim=True)\n"
OTHER = "import torch\n\ndef f(x):\n    return x / x.sum(-1, keepdim=True)\n"


def test_identical_wrong_answers_form_one_group_whatever_their_names_and_formatting():
    doc = document({"a": [answer("e", 1, code=NAIVE)], "b": [answer("e", 1, code=NAIVE_RENAMED)],
                    "c": [answer("e", 1, code=NAIVE)], "d": [answer("e", 2, code=OTHER, mistake="mistake 1")],
                    "e": [answer("e", 3)]},
                   [("e", "l", [mistake("mistake 1")])])
    e = build(doc).exercises[0]
    assert [(g.answers, g.hints) for g in e.groups] == [(3, []), (1, ["mistake 1"])]
    assert e.unexplained_groups == [3] and e.tally.unexplained == 3
    assert "torch.exp(x)" in e.groups[0].code and e.more_groups == (0, 0)


def test_the_example_of_a_group_masks_every_name_of_the_roster():
    code = "import torch\n\ndef f(x):\n    ana_silva = torch.exp(x)\n    return ana_silva / ana_silva.sum()\n"
    doc = document({"x01": [answer("e", 1, code=code)]})
    report = build(doc, roster=[roster.Student("77777", "Ana Silva", "", 2)])
    assert "ana" not in report.exercises[0].groups[0].code.lower()
    assert "torch.exp(x)" in report.exercises[0].groups[0].code


# ----------------------------------------------------------------------------- students, roster, pseudonyms

def test_the_roster_places_submissions_by_id_then_by_name_and_section():
    rows = [roster.Student("20231147", "Victor Leblanc", "a", 2), roster.Student("1", "Li Wei", "a", 3),
            roster.Student("2", "Li Wei", "b", 4), roster.Student("3", "Ana Silva", "b", 5)]
    find = lambda path: roster.match(rows, {"path": path})  # noqa: E731
    assert find("sub/20231147_victor.ipynb").id == "20231147"
    assert find("sub/a/victor_leblanc").id == "20231147"
    assert find("sub/b/li_wei").id == "2" and find("sub/a/li_wei").id == "1"
    assert find("sub/b/view_1") is None, "a short id matches a whole name only"
    assert find("sub/b/1").id == "1"
    with pytest.raises(roster.RosterError, match="fits line 3 .* and line 4"):
        find("sub/li_wei")


def test_students_who_submitted_nothing_and_two_submissions_of_one_student():
    rows = [roster.Student("1", "Ada", "a", 2), roster.Student("2", "Ben", "b", 3)]
    report = build(document({"ada": [answer("e", 3)]}), roster=rows)
    assert [s.shown for s in report.nothing] == ["Ben"] and report.sections == ["a", "b"]
    assert report.by_section["a"].totals == [3] and report.by_section["b"].totals == []
    doc = document({"ada": [answer("e", 3)], "1": [answer("e", 1)]})
    with pytest.raises(roster.RosterError, match="both belong to Ada"):
        build(doc, roster=rows)


def test_pseudonyms_follow_the_seed_of_the_grades_and_the_key_finds_every_student():
    doc = document({f"student_{k}": [answer("e", k % 4)] for k in range(12)})
    one, again = build(doc, pseudonymise=True), build(doc, pseudonymise=True)
    assert {s.key: s.shown for s in one.students} == {s.key: s.shown for s in again.students}
    assert sorted(s.shown for s in one.students) == [f"student {k:02d}" for k in range(1, 13)]
    other = build(dict(doc, pseudonym_seed="another"), pseudonymise=True)
    assert {s.key: s.shown for s in other.students} != {s.key: s.shown for s in one.students}
    key = {row["pseudonym"]: row["student"] for row in one.key}
    assert {key[s.shown] for s in one.students} == set(doc_students(doc))


def doc_students(doc):
    return [s["student"] for s in doc["submissions"]]


# ----------------------------------------------------------------------------- merging grades

def test_merging_refuses_an_exercise_that_changed_between_runs():
    a = document({"x": [answer("e", 3)]})
    b = document({"y": [answer("e", 3)]})
    b["exercises"][0]["points"] = 5.0
    with pytest.raises(grades.GradesError, match="exercise e differs between a.json and b.json"):
        grades.merge([("a.json", a), ("b.json", b)])


def test_merging_tells_apart_students_whose_names_meet():
    a = document({"li_wei": [answer("e", 3)]})
    b = document({"li_wei": [answer("e", 1)]})
    b["submissions"][0].update(path="late/li_wei", source="/late/li_wei")
    merged, notes = grades.merge([("a.json", a), ("b.json", b)])
    assert [s["student"] for s in merged["submissions"]] == ["li_wei (class)", "li_wei (late)"] and notes == []


# ----------------------------------------------------------------------------- figures

def test_histograms_count_every_value_and_say_so_in_their_text_alternative():
    svg, alt = figures.histogram([0, 0, 1.5, 3, 3, 3], 3, label="scores", divisions=6)
    assert "0 points: 2; 0.5 points: 0; 1 points: 0; 1.5 points: 1; 2 points: 0; 2.5 points: 0; 3 points: 3" in alt
    assert svg.count('class="bar"') == 7 and 'role="img"' in svg
    assert "0 points: 2; 1.5 points: 1; 3 points: 3." in figures.histogram([0, 0, 1.5, 3, 3, 3], 3, label="s")[1]
    _, alt = figures.histogram([0.5, 7.25, 11.5, 12], 12, label="totals")
    assert "0-1 points: 1" in alt and "11-12 points: 2" in alt


def test_scores_rounded_to_a_hundredth_still_get_one_bar_per_possible_score():
    _, alt = figures.histogram([3.12, 5, 0.62, 3.12], 5, label="s", divisions=8)  # 5 points over 8 checks
    assert "3.12 points: 2" in alt and "0.62 points: 1" in alt and "5 points: 1" in alt
    svg, alt = figures.histogram([0.33, 0.67, 2, 0.33], 2, label="s", divisions=6)  # 2 points over 6 checks
    assert "0.33 points: 2; 0.67 points: 1" in alt
    labels = re.findall(r'<text class="ink" x="([\d.]+)" y="134"', svg)
    assert len(labels) == 7 and min(float(b) - float(a) for a, b in zip(labels, labels[1:])) > 30


def test_the_scatter_labels_every_exercise_with_its_number():
    items = [(1, "a.x", 0.8, 0.5, False), (2, "b.y", 1.0, None, True), (3, "c.z", 0.3, -0.2, True)]
    svg, alt = figures.scatter(items, 0.2)
    assert "1 a.x: mean 80%, discrimination 50%" in alt and "2 b.y: mean 100%, discrimination undefined, flagged" in alt
    labels = re.findall(r'<text class="ink" x="([\d.]+)" y="([\d.]+)" text-anchor="middle">(\d+)</text>', svg)
    assert [n for _, _, n in labels] == ["1", "2", "3"]
    width = float(re.search(r'width="(\d+)"', svg).group(1))
    assert all(0 < float(x) - 4 and float(x) + 4 < width for x, _, _ in labels), "every label inside the figure"


def test_the_scatter_labels_of_clustered_exercises_do_not_overlap():
    """Twelve exercises near 90% (a class's usual cluster): every label has a place of its own."""
    items = [(k + 1, f"e.{k}", 0.86 + 0.005 * (k % 5), 0.02 * (k % 4) - 0.03, k % 3 == 0) for k in range(12)]
    svg, _ = figures.scatter(items, 0.2)
    boxes = [(float(x) - 7 * len(n) / 2, float(y) - 4 - 6, float(x) + 7 * len(n) / 2, float(y) - 4 + 6)
             for x, y, n in re.findall(r'<text class="ink" x="([\d.]+)" y="([\d.]+)" text-anchor="middle">(\d+)<', svg)]
    assert len(boxes) == 12
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5), (a, b)


def test_one_student_of_the_roster_graded_in_two_runs_is_an_error_unless_replace():
    rows = [roster.Student("20231147", "Victor Leblanc", "a", 2)]
    a = document({"victor_leblanc": [answer("e", 1)]})
    b = document({"20231147": [answer("e", 3)]})  # a late run, another folder: the same student by id
    b["submissions"][0].update(path="late/20231147", source="/late/20231147")

    def same(x, y):
        return (m := roster.match(rows, x)) is not None and m == roster.match(rows, y)

    with pytest.raises(grades.GradesError, match="class/victor_leblanc is graded in a.json and in b.json"):
        grades.merge([("a.json", a), ("b.json", b)], same=same)
    merged, notes = grades.merge([("a.json", a), ("b.json", b)], same=same, replace=True)
    assert [s["score"] for s in merged["submissions"]] == [3] and "replaced by those of b.json" in notes[0]


def test_a_submission_that_could_not_be_read_is_named_and_left_out_of_the_numbers():
    doc = document({"ada": [answer("e", 3)], "ben": [answer("e", 1)], "broken": [answer("e", 0, status="unreadable")],
                    "empty": [answer("e", 0, status="unreadable")]})
    doc["submissions"][3]["files"] = []
    report = build(doc)
    assert report.submissions == 2 and report.exercises[0].tally.students == 2
    assert [(s.shown, s.problems) for s in report.nothing] == [("broken", ["could not be read"]),
                                                              ("empty", ["submitted nothing"])]
    keyed = {(s, i, m): v for s, i, m, v, _ in classstats.numbers(report)}
    assert keyed["class", "", "could not be read"] == 1 and keyed["class", "", "submitted nothing"] == 1
    assert ("student", "broken", "total") not in keyed


@pytest.mark.parametrize("options", [{}, {"pseudonymise": True}, {"roster": True}, {"roster": True, "site_url": "x"}])
def test_the_page_shows_every_number_of_the_csv_and_no_other(options):
    from mha.grading import classreport

    students = {"ada": [answer("e", 3), answer("f", 1, mistake="m", code=NAIVE)],
                "ben": [answer("e", 1, diagnosis="a diagnosis"), answer("f", 0, status="timeout")],
                "broken": [answer("e", 0, status="unreadable"), answer("f", 0, status="unreadable")],
                "cy": [answer("e", 0, status="error"), answer("f", 2, code=OTHER)]}
    doc = document(students, [("e", "01-x", []), ("f", "02-y", [mistake("m", name="named")])])
    rows = [roster.Student("1", "Ada", "A", 2), roster.Student("2", "Ben", "B", 3), roster.Student("3", "Dee", "B", 4)]
    report = build(doc, roster=rows if options.get("roster") else None, pseudonymise=options.get("pseudonymise", False),
                   site_url=options.get("site_url"))
    page = classreport.render(report)
    shown = {html.unescape(k) for k in re.findall(r'data-key="([^"]*)"', page)}
    listed = {f"{s}|{i}|{m}" for s, i, m, _, _ in classstats.numbers(report)}
    assert shown == listed
    assert "could not be read" in page and ("Dee" in page) == bool(options.get("roster") and not options.get("pseudonymise"))


# ----------------------------------------------------------------------------- names and the course's text

def test_no_course_hint_changes_when_fifty_common_names_are_masked():
    """Fifty students named as fifty common first names (Max, Ali, Tom, Li Wei, Ana...) each make
    every listed mistake of the course: every one of the course's hints reaches the page and the
    CSV as the course wrote it, named or pseudonymised, and no code word becomes a name."""
    from mha.autograde.judge import with_hint
    from mha.exercises import EXERCISES
    from mha.grading import classreport
    from test_anonymise import FIFTY

    records = [grades.exercise_record(ex) for ex in EXERCISES.values()]
    code = ("import torch\n\ndef {f}(x):\n    weights = torch.softmax(x, dim=-1)\n    row_max = weights.amax(-1)\n"
            "    bottom = weights - row_max\n    return bottom\n")

    def answer_to(r):
        checks = [{"name": f"public check {k + 1}", "passed": False, "hidden": False, "kind": "mistake",
                   "hint": m["hint"], "mistake": m["key"], "message": with_hint("wrong values", m["hint"], m["name"])}
                  for k, m in enumerate(r["mistakes"])]
        return {"id": r["id"], "title": r["title"], "function": r["function"], "score": 0.0,
                "max_score": float(r["points"]), "status": "graded" if checks else "missing", "message": "",
                "checks": checks, "seconds": 0.1, "code": code.format(f=r["function"])}

    names = [n.lower().replace(" ", "_") for n in FIFTY]
    doc = {"format": grades.FORMAT, "version": grades.VERSION, "graded": "today", "pseudonym_seed": "s",
           "exercises": records,
           "submissions": [{"student": n, "path": f"class/{n}", "source": f"/class/{n}", "files": ["x.py"], "score": 0,
                            "max_score": 1, "exercises": [answer_to(r) for r in records], "notes": []} for n in names]}
    class_list = [roster.Student(f"2024{k:04d}", name, "", k + 2) for k, name in enumerate(FIFTY)]
    hints = {m["hint"] for r in records for m in r["mistakes"]}
    assert len(hints) > 300
    for pseudonymise in (False, True):
        report = build(doc, roster=class_list, pseudonymise=pseudonymise)
        page = html.unescape(classreport.render(report))
        texts = {t for *_, t in classstats.numbers(report)}
        changed = [h for h in hints if h not in page or h not in texts]
        assert not changed, f"{len(changed)} of {len(hints)} course hints changed, e.g. {changed[:2]}"
        assert "[name]" not in page and "name_1" not in page and not any("[name]" in t for t in texts)
        assert "weights = torch.softmax(x, dim=-1)" in page and "row_max = weights.amax(-1)" in page


# ----------------------------------------------------------------------------- groups, slips, what to teach again

FLOAT_MASK = "import torch\n\ndef f(x):\n    return torch.ones(3, 3).tril()\n"
FLOAT_MASK_TEMP = "def f(x):\n    import torch as th\n    m = th.ones(3, 3).tril()\n    return m\n"
FLOAT_MASK_OTHER = "import torch\n\ndef f(x):\n    return torch.tril(torch.ones(3, 3))\n"


def unexplained(code: str, values: str = "v1", message: str = "wrong dtype float32") -> dict:
    a = answer("e", 0, code=code)
    for c in a["checks"]:
        c.update(message=message, value_fingerprint=values)
    return a


def test_an_unexplained_group_is_ranked_with_the_hints_and_first_when_largest():
    """The review's class: 7 float masks (one with an import inside, one with a temporary), no
    hint, against hinted mistakes of 4 and 3 students: the float mask is the first row."""
    students = {f"f{k}": [unexplained([FLOAT_MASK, FLOAT_MASK_TEMP][k % 2])] for k in range(7)}
    students.update({f"m{k}": [answer("e", 1, mistake="mistake 1")] for k in range(4)})
    students.update({f"d{k}": [answer("e", 1, diagnosis="a NaN row")] for k in range(3)})
    report = build(document(students, [("e", "l", [mistake("mistake 1")])]))
    first = report.teach[0]
    assert (first.kind, first.students, first.label) == (classstats.GROUP, 7, "no hint: group 1")
    assert first.hint == "wrong dtype float32" and first.taught.text == "lesson 01: A"
    assert [h.students for h in report.teach] == [7, 4, 3]
    assert (classstats.GROUP, "e", first.key, 7, report.exercises[0].groups[0].failed[0].join(["group 1: ", ""])) \
        in classstats.numbers(report)
    taught = {t.link.text: t.students for t in report.taught}
    assert taught["lesson 01: A"] == 7 + 3, "the unexplained group counts under the exercise's own section"


def test_groups_of_other_code_with_the_same_values_are_one_slip():
    students = {f"a{k}": [unexplained(FLOAT_MASK)] for k in range(2)}
    students.update({f"b{k}": [unexplained(FLOAT_MASK_OTHER)] for k in range(2)})
    students["c"] = [unexplained(FLOAT_MASK_OTHER.replace("3, 3", "3, 4"), values="v2")]
    e = build(document(students)).exercises[0]
    assert [g.answers for g in e.groups] == [2, 2, 1]
    assert list(e.slips.values()) == [[1, 2]]
    [row] = [h for h in build(document(students)).teach if h.kind == classstats.SLIP]
    assert row.students == 4 and row.label == "no hint: groups 1 and 2 (same values)"


def test_an_answer_group_has_an_id_of_its_code_the_same_in_every_report():
    one = build(document({"a": [unexplained(FLOAT_MASK)], "b": [unexplained(FLOAT_MASK)]}))
    two = build(document({"z": [unexplained(FLOAT_MASK_TEMP)], "y": [unexplained(OTHER)],
                          "x": [unexplained(OTHER)]}))
    [g] = one.exercises[0].groups
    assert g.id.startswith("g") and len(g.id) == 11
    assert g.id in {h.id for h in two.exercises[0].groups} and g.id != two.exercises[0].groups[0].id


def test_a_group_shows_every_failure_of_its_answers_with_how_many_got_it():
    """Three answers of one code fail different checks: the group lists each message."""
    a, b, c = (unexplained(OTHER, message=m) for m in ("the dict has no key 'merged'", "'q_heads' is wrong",
                                                       "'q_heads' is wrong"))
    [g] = build(document({"a": [a], "b": [b], "c": [c]})).exercises[0].groups
    assert g.failed == ["public checks 1, 2, 3: the dict has no key 'merged' (1 of 3 answers)",
                        "public checks 1, 2, 3: 'q_heads' is wrong (2 of 3 answers)"]
    assert g.message == "'q_heads' is wrong"


# ----------------------------------------------------------------------------- who needs help, who copied

def test_an_empty_folder_is_told_apart_from_submitting_nothing():
    doc = document({"a": [answer("e", 3)], "b": [answer("e", 1)]})
    doc["submissions"].append({"student": "tom", "path": "class/tom", "files": [], "score": 0, "max_score": 3,
                               "exercises": [answer("e", 0, status="unreadable")],
                               "notes": ["nothing to grade: no .ipynb, .md, .py file in the folder tom"]})
    report = build(doc)
    assert [s.problems for s in report.nothing] == [[classstats.EMPTY_FOLDER]]
    assert ("class", "", "submitted nothing", 1, "") in classstats.numbers(report)
    assert ("class", "", classstats.EMPTY_FOLDER, 1, "") in classstats.numbers(report)


def test_the_students_to_contact_and_each_student_s_fifth():
    students = {f"s{k}": [answer("e", k % 4), answer("g", 3)] for k in range(10)}
    students["stub"] = [answer("e", 0, status="not attempted"), answer("g", 0, status="not attempted")]
    students["crash"] = [answer("e", 0, status="crashed"), answer("g", 3)]
    report = build(document(students))
    contact = {why: [s.shown for s in who] for why, who in report.contact.items()}
    assert contact["handed in a lesson untouched"] == ["stub"]
    assert contact["a forbidden call, a crash or a time-out"] == ["crash"]
    weakest = contact["the weakest fifth by total"]
    assert len(weakest) == 3 and weakest[0] == "stub"
    assert sorted(s.fifth for s in report.students).count(1) == 3
    [stub] = [s for s in report.students if s.shown == "stub"]
    assert "lesson lesson: handed in untouched (no answer written)" in stub.problems


def test_identical_submissions_are_flagged_on_the_named_page_only():
    def written(score, fp, code=""):
        a = answer("e", score, code=code)
        a["code_fingerprint"] = fp
        return a

    def submission(*prints):
        return [written(1 if p == "rare-wrong" else 3, p) | {"id": i} for i, p in zip("egh", prints)]

    students = {"ann": submission("rare-wrong", "c1", "c2"), "bob": submission("rare-wrong", "c1", "c2"),
                "cy": submission("c0", "c1", "c2"), "di": submission("c0", "c1", "c2"),
                "eve": submission("c0", "cx", "c2")}
    doc = document(students, [("e", "l", []), ("g", "l", []), ("h", "l", [])])
    [flag] = build(doc).identical
    assert [s.shown for s in flag.students] == ["ann", "bob"] and (flag.answers, flag.wrong, flag.unique) == (3, 1, 1)
    assert build(doc, pseudonymise=True).identical == [], "cy and di write the same right answers: no flag"


# ----------------------------------------------------------------------------- overrides and lateness

def adjusted(doc, overrides=(), due=None, penalty=None, times=None):
    from mha.grading import adjust

    for s in doc["submissions"]:
        s["submitted"] = {"x.py": (times or {}).get(s["student"], "2024-03-01T12:00:00")}
    doc["adjustments"] = adjust.record([adjust.Override(*o, line=k + 2) for k, o in enumerate(overrides)],
                                       adjust.parse_due(due), adjust.parse_policy(penalty))
    return doc


def test_overrides_change_the_points_and_keep_the_trail():
    doc = adjusted(document({"ann": [answer("e", 1)], "bob": [answer("e", 2)]}),
                   [("ann", "e", 2.0, "regrade request: the mask is right"), ("ann", "e", 3.0, "on second look"),
                    ("2024", "e", 0.0, "unused")][:2])
    report = build(doc)
    assert {s.shown: s.total for s in report.students} == {"ann": 3.0, "bob": 2.0}
    assert [t["status"] for t in report.trail] == ["replaced by line 3", "applied"]
    assert report.trail[1]["graded"] == 1 and report.exercises[0].tally.mean == 2.5
    assert ("student", "ann", "override e", 3, "graded 1") in classstats.numbers(report)
    later = build(adjusted(document({"ann": [answer("e", 1)]}), [("ann", "dims.split_heads", 3.0, "for lesson 03")]))
    assert later.trail[0]["status"] == "waiting: the exercise is not graded here", "a lesson graded in another run"


@pytest.mark.parametrize("row,message", [
    (("carl", "e", 1.0, "x"), "no student 'carl'"),
    (("ann", "z", 1.0, "x"), "'z' is not an exercise of these grades (e) or of the course"),
    (("ann", "e", 4.0, "x"), "4 points for e, which is worth 3"),
])
def test_an_override_that_cannot_apply_is_refused_with_its_line(row, message):
    from mha.grading import adjust

    with pytest.raises(adjust.AdjustError, match=re.escape(message)):
        build(adjusted(document({"ann": [answer("e", 1)]}), [row]))


def test_a_late_lesson_loses_its_share_per_started_day_up_to_the_cap_and_an_override_waives_it():
    doc = adjusted(document({"ann": [answer("e", 3)], "bob": [answer("e", 3)], "cy": [answer("e", 2)],
                             "di": [answer("e", 3)]}),
                   [("di", "late", 0.0, "illness: extension agreed")], due=["2024-03-01 23:59"],
                   penalty="10%/day,max=20%,grace=15min",
                   times={"ann": "2024-03-02T00:10:00", "bob": "2024-03-02T10:00:00", "cy": "2024-03-10T00:00:00",
                          "di": "2024-03-05T00:00:00"})
    report = build(doc)
    rows = {s.shown: (s.hours_late, s.penalty, s.final) for s in report.students}
    assert rows["ann"] == (0.2, 0.0, 3.0), "within the grace period"
    assert rows["bob"] == (10.0, 0.3, 2.7)
    assert rows["cy"] == (192.0, 0.4, 1.6), "the cap: 20% of the 2 points earned"
    assert rows["di"][1:] == (0.0, 3.0)
    assert report.exercises[0].tally.mean == 2.75, "the item statistics keep the points as graded"


# ----------------------------------------------------------------------------- grades of other versions

def test_files_graded_with_another_hint_are_not_merged_and_other_exercise_sets_are_named():
    a = document({"ann": [answer("e", 1)]}, [("e", "l", [mistake("mistake 1", hint="the hint")])])
    b = document({"bob": [answer("e", 2)]}, [("e", "l", [mistake("mistake 1", hint="last year's hint")])])
    with pytest.raises(grades.GradesError, match="exercise e differs between a.json and b.json"):
        grades.merge([("a.json", a), ("b.json", b)])
    c = document({"cy": [answer("f", 2)]})
    _, notes = grades.merge([("a.json", a), ("c.json", c)])
    assert notes == ["a.json grades none of f (graded in c.json): its students have no points for them, in the report "
                     "and every output",
                     "c.json grades none of e (graded in a.json): its students have no points for them, in the report "
                     "and every output"]


def test_a_file_graded_with_exercises_the_course_no_longer_has_says_so():
    doc = document({"ann": [answer("dims.merge_heads", 1)]})
    assert grades.against_course(doc, "old.json") == [
        "old.json: dims.merge_heads is not an exercise of the course installed here (an older or newer version's, or "
        "a renamed one): the report shows it as it was graded"]
    doc["exercises"][0].update(id="dims.split_heads", source={"file": "mha/exercises/lesson03_dimension_math.py",
                                                              "hash": "0123456789abcdef"})
    [note] = grades.against_course(doc, "old.json")
    assert "the exercises of lesson03_dimension_math.py changed since it was graded (dims.split_heads)" in note


def test_a_grades_file_edited_after_grading_says_so():
    doc = document({"ann": [answer("e", 1)]}, [("e", "l", [mistake("mistake 1", hint="the hint")])])
    doc["exercises"][0]["definition"] = grades.definition(doc["exercises"][0])
    assert [n for n in grades.against_course(doc, "g.json") if "edited" in n] == []
    doc["exercises"][0]["mistakes"][0]["hint"] = "AN OLD HINT from last year"
    assert [n for n in grades.against_course(doc, "g.json") if "edited" in n] == [
        "g.json: what it records of e (title, points, mistakes or hints) is not what it was graded with: the file was "
        "edited after grading"]


def test_a_file_of_format_3_merges_with_one_of_format_4_graded_with_the_same_exercises():
    old = document({"ann": [answer("e", 1)]}, [("e", "l", [mistake("mistake 1", hint="the hint")])])
    new = document({"bob": [answer("e", 2)]}, [("e", "l", [mistake("mistake 1", hint="the hint")])])
    old["version"] = 3
    new["exercises"][0]["definition"] = grades.definition(new["exercises"][0])
    merged, notes = grades.merge([("old.json", old), ("new.json", new)])
    assert [s["student"] for s in merged["submissions"]] == ["ann", "bob"] and notes == []
    assert build(merged).submissions == 2
