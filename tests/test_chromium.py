"""The browser tests' set-up: a machine without Debian's Chromium gets one clear line with the install command."""

import re

import pytest

import chromium


def test_a_missing_chromium_fails_with_the_install_command_and_no_traceback(tmp_path, monkeypatch):
    monkeypatch.setattr(chromium, "CHROMIUM", str(tmp_path / "no-chromium"))
    with pytest.raises(pytest.fail.Exception) as info:
        with chromium.dashboard_browser(tmp_path / "runs"):
            pass
    assert "apt-get install -y chromium" in str(info.value) and str(tmp_path / "no-chromium") in str(info.value)
    assert not info.value.pytrace and not (tmp_path / "runs").exists()


def test_the_readme_test_command_installs_chromium_when_missing():
    readme = (chromium.ROOT / "README.md").read_text()
    test = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)[1]
    first = test.splitlines()[0]
    assert "command -v chromium" in first and "apt-get install -y chromium" in first
    assert "playwright install" not in readme
