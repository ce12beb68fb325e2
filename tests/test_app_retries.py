"""The Retries and fairness page through Streamlit's AppTest: three policies, two tenants, predict then reveal."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def test_retries_page_compares_policies_and_tenants_then_reveals_the_answer() -> None:
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.switch_page("pages/retries.py").run()
    assert not at.exception
    policies = at.dataframe[0].value
    assert list(policies["policy"]) == ["no retry", "immediate retries", "backoff + shedding"]
    by = policies.set_index("policy")
    assert by.loc["no retry", "amplification"] == 1.0 and by.loc["immediate retries", "amplification"] > 1.0
    assert by.loc["backoff + shedding", "goodput, req/s"] > by.loc["immediate retries", "goodput, req/s"]
    tenants = at.dataframe[1].value
    assert set(tenants["scheduling"]) == {"fcfs", "fair"} and set(tenants["tenant"]) == {"batch", "chat"}
    assert not at.success  # nothing revealed before the question is answered
    at.radio(key="retries_quiz_guess").set_value("goodput falls").run()
    at.button(key="retries_quiz_reveal").click().run()
    assert not at.exception
    assert at.success and "Right." in at.success[0].value and "Goodput falls" in at.success[0].value
