"""API base prefixes: which URLs may receive a worker's key."""

from __future__ import annotations

import pytest

from parley.shared.api_bases import display_base, is_allowed_base, parse_api_base

ALLOWED = ("https://api.example.com/v1",)


@pytest.mark.parametrize("url", [
    "https://api.example.com/v1",
    "https://api.example.com/v1/",
    "https://api.example.com/v1/chat/completions",
    "HTTPS://API.EXAMPLE.COM/v1",
    "https://api.example.com:443/v1",
    "https://api.example.com./v1",
    "https://api.example.com//v1",
    "https://api.example.com/v1?api-version=2024-06-01",
])
def test_urls_under_the_prefix_are_allowed(url):
    assert is_allowed_base(url, ALLOWED)


@pytest.mark.parametrize("url", [
    "https://api.example.com.evil.net/v1",
    "https://evil.net/api.example.com/v1",
    "https://api.example.com@evil.net/v1",
    "https://user:pass@api.example.com/v1",
    "https://evil.net#@api.example.com/v1",
    "https://evil.net\\@api.example.com/v1",
    "https://api.example.com\\@evil.net/v1",
    "https://xapi.example.com/v1",
    "https://example.com/v1",
    "http://api.example.com/v1",
    "https://api.example.com:8443/v1",
    "https://api.example.com/v10",
    "https://api.example.com/",
    "https://api.example.com",
    "https://api.example.com/v2/v1",
    "https://api.example.com/v1/../admin",
    "https://api.example.com/v1/%2e%2e/admin",
    "https://api.example.com/v1/./x",
    "https://api.ex%61mple.com/v1",
    "https://api.exämple.com/v1",
    "https://api.example.com /v1",
    "https://api.example.com\t/v1",
    "https://api.example.com:99999/v1",
    "https://api.example.com:x/v1",
    "ftp://api.example.com/v1",
    "api.example.com/v1",
    "",
])
def test_urls_outside_the_prefix_are_not(url):
    assert not is_allowed_base(url, ALLOWED)


def test_a_prefix_without_a_path_allows_the_whole_host_and_port():
    allowed = ["http://127.0.0.1:8000"]
    assert is_allowed_base("http://127.0.0.1:8000/v1", allowed)
    assert is_allowed_base("http://127.0.0.1:8000", allowed)
    assert not is_allowed_base("http://127.0.0.1:8001/v1", allowed)
    assert not is_allowed_base("http://127.0.0.1/v1", allowed)


def test_a_default_port_and_case_in_the_prefix_are_normalised_too():
    allowed = ["HTTPS://Api.Example.com:443/V1/"]
    assert is_allowed_base("https://api.example.com/V1/chat", allowed)
    # Paths are case-sensitive on the server: /v1 is not /V1.
    assert not is_allowed_base("https://api.example.com/v1", allowed)


def test_ipv6_hosts_are_compared_as_addresses():
    allowed = ["http://[::1]:8000/v1"]
    assert is_allowed_base("http://[0:0:0:0:0:0:0:1]:8000/v1/x", allowed)
    assert not is_allowed_base("http://[::2]:8000/v1", allowed)


def test_any_of_several_prefixes_allows_and_a_bad_prefix_allows_nothing():
    allowed = ["not a url", "http://127.0.0.1:8000/v1", "https://llm.internal"]
    assert is_allowed_base("https://llm.internal/openai/v1", allowed)
    assert is_allowed_base("http://127.0.0.1:8000/v1", allowed)
    assert not is_allowed_base("not a url", allowed)
    assert not is_allowed_base("https://llm.internal/v1", [])


@pytest.mark.parametrize(("url", "problem"), [
    ("ftp://host/v1", "is not an http:// or https:// URL"),
    ("https://user@host/v1", "credentials (user@)"),
    ("https://host/a/../b", "'.' and '..' segments"),
    ("https://ho st/v1", "whitespace"),
    ("https:///v1", "has no host"),
    ("https://host:70000/v1", "invalid port"),
])
def test_a_url_that_cannot_be_normalised_says_why(url, problem):
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse_api_base(url)


def test_the_displayed_base_has_no_credentials_query_or_default_port():
    assert display_base("HTTPS://Api.Example.com:443/v1/?key=x") == "https://api.example.com/v1"
    assert display_base("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert "secret" not in display_base("https://me:secret@host/v1")
