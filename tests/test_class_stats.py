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
    numbers = re.findall(r'<text class="ink" x="[\d.]+" y="[\d.]+" text-anchor="(?:start|end)">(\d+)</text>', svg)
    assert numbers == ["1", "2", "3"]
    right = re.search(r'>2</text>', svg).start()
    assert 'text-anchor="end"' in svg[svg.rfind("<text", 0, right):right], "a label at 100% stays inside the figure"


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
