"""servebench.dashboard.sources: the record sets the dashboard holds and the sidebar's decisions, as plain functions."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from servebench.dashboard.sources import (
    Dataset,
    ReadAs,
    RecordSource,
    attach_scrapes,
    fallback_source,
    import_read_as,
    query_float,
    record_files,
    scenario_files,
    sort_uploads,
    upload_sources,
)
from servebench.records.importers import ImportOptions
from servebench.records.loaders import read_bytes
from servebench.records.window_zoom import full_table

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "sample_data"


def test_a_source_is_named_by_the_digest_of_its_bytes() -> None:
    a, b = RecordSource.of("a.csv", b"x", "upload"), RecordSource.of("renamed.csv", b"x", "sample")
    assert a.digest == b.digest and len(a.digest) == 16
    assert RecordSource.of("a.csv", b"y", "upload").digest != a.digest


def test_read_as_keys_tell_formats_and_options_apart() -> None:
    assert ReadAs().key == "auto" and ReadAs("csv").key == "csv"
    with_options = ReadAs("aiperf", ImportOptions(tokens="server"))
    assert with_options.key.startswith("aiperf:") and with_options.key != ReadAs("aiperf").key


def test_the_shipped_samples_are_record_files_and_scenarios_yaml() -> None:
    samples = record_files(SAMPLE_DIR)
    assert samples == ["r1_r4.json", "requests_sample.csv"]  # profiles_ab.json is a profile table, not records
    assert "profile_b.yaml" in scenario_files(SAMPLE_DIR / "scenarios")


names = st.sampled_from(["a.csv", "b.jsonl", "c.parquet", "server_metrics.parquet", "x_server_metrics_export.parquet"])


@given(st.lists(st.tuples(names, st.binary(min_size=1, max_size=4)), max_size=8))
def test_every_upload_is_either_records_or_server_metrics_and_none_is_lost(files) -> None:
    up = sort_uploads([RecordSource.of(n, d, "upload") for n, d in files], {})
    scrape_names = [n for n, _ in files if "server_metrics" in n]
    assert sorted(s.name for s in up.scrapes) == sorted(scrape_names)
    record_digests = {RecordSource.of(n, d, "upload").digest for n, d in files if "server_metrics" not in n}
    assert set(up.records) == record_digests
    assert (up.newest is None) == (not record_digests)


def test_a_held_upload_is_hashed_once_and_sorted_as_its_bytes_would_be(monkeypatch) -> None:
    import servebench.dashboard.sources as sources

    files = [("a.csv", b"aaa"), ("b.csv", b"bbb")]
    expected = [RecordSource.of(n, d, "upload").digest for n, d in files]
    hashed: list[bytes] = []
    real = sources.hashlib.sha256
    monkeypatch.setattr(sources.hashlib, "sha256", lambda data: hashed.append(data) or real(data))
    digests: dict[str, str] = {}
    first = upload_sources([("id-1", "a.csv", b"aaa")], digests)
    both = upload_sources([("id-1", "a.csv", b"aaa"), ("id-2", "b.csv", b"bbb")], digests)
    assert hashed == [b"aaa", b"bbb"]  # the held file was not hashed again
    assert [s.digest for s in both] == expected
    assert both[0] == first[0]
    up = sort_uploads(both, {first[0].digest: first[0]}, fresh={1})
    assert up.newest == both[1] and list(up.records) == [s.digest for s in both]
    upload_sources([("id-2", "b.csv", b"bbb")], digests)  # a.csv removed with its x: its id is let go
    assert list(digests) == ["id-2"] and hashed == [b"aaa", b"bbb"]


def test_the_newest_upload_is_the_last_one_not_held_already() -> None:
    a = RecordSource.of("a.csv", b"a", "upload")
    up = sort_uploads([a, RecordSource.of("b.csv", b"b", "upload")], {a.digest: a})
    assert up.newest is not None and up.newest.name == "b.csv"
    assert sort_uploads([a], {a.digest: a}).newest is None  # nothing new: the view stays


def test_a_gone_record_set_falls_back_to_the_last_good_then_the_newest_then_the_default() -> None:
    a, b = RecordSource.of("a.csv", b"a", "upload"), RecordSource.of("b.csv", b"b", "upload")
    sample, default = RecordSource.of("s.csv", b"s", "sample"), RecordSource.of("d.csv", b"d", "sample")
    held = {a.digest: a, b.digest: b}
    assert fallback_source(held, a, default) is a
    assert fallback_source({b.digest: b}, a, default) is b  # the last good one was removed
    assert fallback_source({}, sample, default) is sample  # a sample is never removed
    assert fallback_source({}, a, default) is default


def test_server_metrics_join_the_record_set_on_screen_and_leave_with_their_upload() -> None:
    r1, r2 = RecordSource.of("r1.csv", b"1", "upload"), RecordSource.of("r2.csv", b"2", "upload")
    m = RecordSource.of("server_metrics.parquet", b"m", "upload")
    attached: dict[str, RecordSource] = {}
    attach_scrapes(attached, [m], r1)
    attach_scrapes(attached, [m], r2)  # still uploaded: it stays with r1, not the set shown now
    assert attached == {r1.digest: m}
    attach_scrapes(attached, [], r2)
    assert attached == {}


def test_url_numbers_that_are_not_numbers_are_ignored() -> None:
    assert query_float({"ws": "12.5"}, "ws") == 12.5
    assert query_float({"ws": "twelve"}, "ws") is None and query_float({}, "we") is None


def test_import_options_read_again_only_when_one_is_set() -> None:
    assert import_read_as("aiperf", None, False, False) is None
    again = import_read_as("guidellm", 2, True, False)
    assert again == ReadAs("guidellm", ImportOptions(run=2, outside_window="drop", tokens="client"))


def test_a_dataset_says_its_window_from_the_first_request_and_whether_it_has_one_clock() -> None:
    data = b"start,first_token,end,status,output_tokens\n100,100.5,101,success,3\n102,102.5,104,success,3\n"
    loaded = read_bytes(data, "r.csv")
    table = full_table(loaded)
    ds = Dataset(RecordSource.of("r.csv", data, "upload"), loaded, table, 100.0, 104.0, origin_s=100.0)
    assert ds.shared_clock and not ds.unavailable
    assert "0 to 4 s from the first request" in ds.window_text()
