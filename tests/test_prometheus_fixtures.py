"""The fake Prometheus's reading of exposition text (``tests/prometheus_fixtures.py``) is prometheus-client's.

:func:`~tests.prometheus_fixtures.exposition_samples` reads plain text itself, a regular
expression a line (the 64-host fleet tests read 70,000 samples: 7.5 s of CPU through the
parser), and hands any other text to prometheus-client's parser. Here both must give the same
samples, in the same order, for what the simulated exporter serves and for the corners of the
format where the parser renames, splits or refuses; the plain reading must not refuse what the
simulated exporter serves (else the fleet tests are slow again, silently).
"""

from __future__ import annotations

import json
import math
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .prometheus_fixtures import (
    _plain_samples,
    exposition_samples,
    served_expositions,
    simulated_exposition,
    simulated_expositions,
)


def parsed(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def same(got: list[tuple[str, dict[str, str], float]], want: list[tuple[str, dict[str, str], float]]) -> bool:
    """Equal, NaN equal to NaN."""
    return len(got) == len(want) and all(
        (g[0], g[1]) == (w[0], w[1]) and (g[2] == w[2] or (math.isnan(g[2]) and math.isnan(w[2])))
        for g, w in zip(got, want, strict=True)
    )


@pytest.mark.parametrize(
    ("seed", "gpus", "faults"),
    [(0, 1, []), (1, 8, []), (2, 3, ["mig=3@1"]), (3, 4, ["xid=48:2@0", "lost@1", "hang=120:3@2", "hot@3"])],
)
def test_the_simulated_exporters_text_is_read_plainly_and_as_the_parser_reads_it(seed, gpus, faults):
    text = simulated_exposition(f"node{seed}", seed, gpus, faults=faults)
    plain = _plain_samples(text)
    assert plain is not None, "the simulated exporter's text takes the plain path"
    assert same(plain, parsed(text))
    assert len(plain) > 20 * gpus


CORNERS = {
    "a counter named without _total": '# HELP jobs Jobs.\n# TYPE jobs counter\njobs{a="1"} 3\njobs{a="2"} 4\n',
    "a counter named with _total": "# TYPE jobs_total counter\njobs_total 3\n",
    "a sample outside its family": "# TYPE jobs counter\nother 1\njobs 2\n",
    "a histogram": '# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\nh 9\n',
    "a summary": '# TYPE s summary\ns{quantile="0.5"} 1\ns_sum 3\ns_count 2\n',
    "no HELP or TYPE": 'a 1\nb{x="y"} NaN\nc -Inf\nd +Inf\ne 1e3\n',
    "HELP of the same family after TYPE": "# TYPE g gauge\n# HELP g G.\ng 1\n",
    "other comments and blank lines": "# a comment\n\n#\n# HELP\ng 1\n",
    "a trailing comma": 'g{a="1",} 1\n',
    "empty braces and values": 'g{} 1\ng{a=""} 2\n',
    "escapes": 'g{a="x\\"y\\\\z\\n"} 1\n',
    "a timestamp": "g 1 1700000000000\n",
    "tabs": "g\t1\n",
    "an = in a value": 'g{a="b=c"} 1\n',
    "commas and braces in a value": 'g{a="b,c}",d="e"} 1\n',
    "an unknown type": "# TYPE u stateset\nu 1\n",
}


@pytest.mark.parametrize("text", CORNERS.values(), ids=CORNERS.keys())
def test_every_corner_is_read_as_the_parser_reads_it(text):
    assert same(exposition_samples(text), parsed(text))


@pytest.mark.parametrize(
    "text",
    [
        'g{a="1",a="2"} 1\n',  # a label twice
        "g 1_0\n",  # a digit separator
        'g{__x="1"} 1\n',  # a reserved label name
        "# TYPE g\ng 1\n",  # a TYPE without its type
        "g one\n",
    ],
)
def test_what_the_parser_refuses_is_refused(text):
    with pytest.raises(ValueError):
        parsed(text)
    with pytest.raises(ValueError):
        exposition_samples(text)


def test_the_fake_prometheus_replaces_labels_as_prometheus_does():
    """``label_replace(v, dst, replacement, src, regex)``: the regex anchored on src's value ("" where the row has
    none), ``$1``/``${1}`` its groups, an empty result dropping dst; a row that does not match is left as it was."""
    from .prometheus_fixtures import FakePrometheus, Series

    with FakePrometheus() as fake:
        fake.now = 100.0
        fake.set_series(
            [
                Series({"__name__": "a", "gpu": "0", "instance": "x:1"}, 1.0, 99.0),
                Series({"__name__": "b", "gpu": "1", "instance": "y:2", "pod": "p"}, 2.0, 99.0),
            ]
        )

        def rows(query: str) -> list[dict[str, str]]:
            answer = json.loads(fake.answer(query))
            assert answer["status"] == "success", answer
            return sorted((item["metric"] for item in answer["data"]["result"]), key=lambda m: sorted(m.items()))

        named = 'label_replace(count by (gpu) ({__name__=~"a|b"}), "__name__", "identity", "", "")'
        assert rows(named) == [{"gpu": "0", "__name__": "identity"}, {"gpu": "1", "__name__": "identity"}]
        # `or` matches rows on their labels but __name__: a's gpu 0 is identity's gpu 0, and dropped
        assert rows(f'{named} or max by (__name__, gpu) ({{__name__="a"}})') == [
            {"gpu": "0", "__name__": "identity"},
            {"gpu": "1", "__name__": "identity"},
        ]
        host = 'label_replace({__name__=~"a|b"}, "host", "h-${1}-$2", "instance", "(.*):(1)")'
        assert [m.get("host") for m in rows(host)] == ["h-x-1", None]
        assert [m.get("pod") for m in rows('label_replace({__name__="b"}, "pod", "", "gpu", "1")')] == [None]
        refused = json.loads(fake.answer('label_replace({__name__="a"}, "0bad", "x", "", "")'))
        assert refused["status"] == "error"


def test_the_fake_prometheus_ors_as_prometheus_does():
    """``a or b``: b's rows whose labels but ``__name__`` are none of a's (Prometheus 2.42 measured: two series of
    one GPU are one row); ``a or on(labels) b``: matched on those labels only, ``__name__`` too where named."""
    from .prometheus_fixtures import FakePrometheus, Series

    with FakePrometheus() as fake:
        fake.now = 100.0
        fake.set_series(
            [
                Series({"__name__": "util", "gpu": "0", "instance": "x:1"}, 1.0, 99.0),
                Series({"__name__": "temp", "gpu": "0", "instance": "x:1"}, 2.0, 99.0),
                Series({"__name__": "temp", "gpu": "1", "instance": "x:1"}, 3.0, 99.0),
            ]
        )

        def names(query: str) -> list[tuple[str, str]]:
            answer = json.loads(fake.answer(query))
            return sorted((item["metric"]["__name__"], item["metric"]["gpu"]) for item in answer["data"]["result"])

        util, temp = (f'max by (__name__, instance, gpu) ({{__name__="{name}"}})' for name in ("util", "temp"))
        assert names(f"{util} or {temp}") == [("temp", "1"), ("util", "0")]
        assert names(f"{util} or on(__name__, instance, gpu) {temp}") == [("temp", "0"), ("temp", "1"), ("util", "0")]
        assert names(f"{util} or on(instance) {temp}") == [("util", "0")]


@pytest.mark.timeout(30)
def test_an_exporters_successive_seconds_move_and_are_served_in_turn():
    """bench_fleet's hosts: the same GPUs and processes a second apart, some values moved; one text a scrape."""
    first, second = simulated_expositions("node007", 7, 2, ticks=2)
    assert first == simulated_exposition("node007", 7, 2)

    def values(text: str) -> dict[str, float]:
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[:1] != "#"}

    before, after = values(first), values(second)
    assert before.keys() == after.keys()  # the same series: GPUs, processes, labels
    moved = {key.split("{")[0] for key in before if before[key] != after[key]}
    assert {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "nvtopy_process_gpu_memory_bytes"} <= moved
    with served_expositions([[b"one", b"two"], b"only"]) as (turning, fixed):
        seen = [urllib.request.urlopen(f"http://{turning}/metrics", timeout=5).read() for _ in range(3)]
        assert seen == [b"one", b"two", b"one"]
        assert urllib.request.urlopen(f"http://{fixed}/metrics", timeout=5).read() == b"only"
