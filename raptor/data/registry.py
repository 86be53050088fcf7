"""Known published TKG benchmark releases: where their files are and what they hash to.

A dataset of params ``datasets`` whose name is registered here needs no other key: ``YAGO: {}``
takes its raw folder, layout, calendar and per-file checksums from its :class:`Release` (any key
given in params wins). Ingest checks every file it reads against the release's checksums and
refuses a file that differs, naming the file, both digests and the release.

Checksums are ``sha256:<hex>`` where the file itself was hashed, and ``git-sha1:<hex>`` (the git
blob id, ``git hash-object FILE``) where only the publishing repository's tree records it: large
files of some releases are not stored in the public mirrors, yet their blob ids are published by
the repository and pin the content just as well.

Provenance of the digests (tests check the ICEWS ones against ``../shared/data/SHA256SUMS``):

* ICEWS14, ICEWS18, ICEWS05-15: the RE-GCN-layout copies in ``../shared/data`` (its SHA256SUMS);
  ICEWS05-15's train.txt matches the git-LFS pointer of the release (shared/data/README.md).
* YAGO, WIKI: JHL-HUST/TITer at commit 2f79a63b, ``data/<name>/`` (the xERTE/RE-NET copies; YAGO's
  entity2id.txt carries start/end dates after the id, read by the ``ids`` layout).
* GDELT: INK-USC/RE-Net at commit a0e5f473, ``data/GDELT/`` (timestamps in minutes, 15-minute
  steps, January 2018).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from raptor.common.io import sha256_file

#: Where the shared benchmark copies live, relative to the repository root (as in params.yaml).
SHARED_DATA = "../shared/data"

#: ``algorithm:hexdigest`` of one file.
CHECKSUM = re.compile(r"^(sha256:[0-9a-f]{64}|git-sha1:[0-9a-f]{40})$")

_TITER = "https://github.com/JHL-HUST/TITer/tree/2f79a63b099d4bb46c9ba707e88fce0aaa9af4ed/data"
_RENET = "https://github.com/INK-USC/RE-Net/tree/a0e5f4732c5bb20d939f0f69e34fb9cf156ac1b2/data"
_REGCN = ("the RE-GCN-layout release (https://github.com/Lee-zix/RE-GCN, data-release.tar.gz; checksums of the "
          "copies in ../shared/data)")


@dataclass(frozen=True)
class Release:
    """One published dataset release (field meanings as in :class:`raptor.config.DatasetConfig`)."""

    source: str
    checksums: Mapping[str, str] = field(default_factory=dict)
    layout: str = "ids"
    start_date: Optional[str] = None
    granularity: Optional[str] = None
    time_step: Optional[int] = None

    def defaults(self, name: str) -> dict:
        """The ``datasets.<name>`` keys this release supplies (params may override each)."""
        out = {"raw_dir": f"{SHARED_DATA}/{name}", "source": self.source, "layout": self.layout,
               "checksums": dict(self.checksums)}
        for key in ("start_date", "granularity", "time_step"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def _sha(**files: str) -> dict[str, str]:
    return {f"{k}.txt": (v if ":" in v else f"sha256:{v}") for k, v in files.items()}


RELEASES: dict[str, Release] = {
    "ICEWS14": Release(
        source=_REGCN, start_date="2014-01-01", granularity="day",
        checksums=_sha(
            train="228da10c44ae0a5babc439c76e063ee8094352da7270b299b0b0a6778cddd0f4",
            valid="b046fe729601246f0b52fceff371e7cb668b63669aee812ddf392cad4fcd8196",
            test="1ce0a75fbdc1d1e041efe290f44948722327c65a9ea09a728060b2c34d3474bd",
            entity2id="0251b09f1c2e56cdc5506f9d7f83e7a88d5d54c3df25609ae8ce4edb7fb3e573",
            relation2id="32fcce0906d05205824f03e980981436a71a85feba72a817f5291e4afda9d04e")),
    "ICEWS18": Release(
        source=_REGCN, start_date="2018-01-01", granularity="day",
        checksums=_sha(
            train="0f1746782f70e0a2e7bb7be73592b155f0e329117da982b5a2fce3bf3e499045",
            valid="5a64212063561529370010d5e3a449cc8fa4d4a1c202de78997b09b83341f13a",
            test="4053a3c290aa6a478db5a46524e8688b20eabccaea9fde57927eb1c727224744",
            entity2id="7847abe5769eb55efced507743ee13ace96b5c16586e43dd3f53dfc77f72d430",
            relation2id="c3d1d7d758060d3785623bbe6834c8678fb3ddcc7b30f6fdb6ec97b55b9aa7d7")),
    "ICEWS05-15": Release(
        source=_REGCN, start_date="2005-01-01", granularity="day",
        checksums=_sha(
            train="fc1cfb55a08e6c08b08f67b00aa10ca2f068a0122cc48242f2bf7ff0b468b7e0",
            valid="3e001c4452922d0be96264549b9497285bbfe71bda6cae6aaf1fd9d212c286be",
            test="3a62ae8edf4265fa6cce3e3997894a565b85b9349f0f77ad19f2742df240ea8e",
            entity2id="cdbdf157aa24aa4be2ec44d5ded6ebb48b087e287e9550867e60d97547a29edf",
            relation2id="8b1a98961005e80b84fc1602b0764912ba64781361cde126bbc9d4aab85b8e85")),
    # Yearly snapshots; the releases do not say which year step 0 is, so explanations print steps.
    "YAGO": Release(
        source=f"{_TITER}/YAGO", granularity="year",
        checksums=_sha(
            train="31f78c30627ffe143940a5dadf06562602944e58f1c766481e894a366561f7ec",
            valid="c99d9d520264a9f0f8ef5774436f0d3941fbb3637181b6f2ad0dd665da9d2bb2",
            test="9b2c808c89f9045ddbc92983b84e88333fa1ce695abacd4f2531d47d9df5248a",
            entity2id="3a5482d19f80b3936ca735ea105db799f5c500b170c57f7a59f0ea2650231789",
            relation2id="83e460205fa11720980c814aa99d70b4ec42ff9571f7ce9915390e262fc8dc34")),
    "WIKI": Release(
        source=f"{_TITER}/WIKI", granularity="year",
        checksums=_sha(
            train="git-sha1:59817114c4510edead00383e46cbc92d3b016b70",
            valid="d9fb60e43b9e6ed970c6c63f1252d2bb5b3ed60eb1384a51e4b771d624350663",
            test="3e70736c25102f85faac7e0763263d67b113a3698e71efac72bb4dc2f84c9d79",
            entity2id="307628d198b9369b650d46bb88980b38ed0957a9e8148227c94907f9b2804f01",
            relation2id="50e6d3c632dde882c8a84aece1eda1f640f4a79a184033eb0941c10dad90e517")),
    "GDELT": Release(
        source=f"{_RENET}/GDELT", start_date="2018-01-01T00:00", granularity="15min",
        checksums=_sha(
            train="git-sha1:d797e6a51cd48ab9a562c014bcff52256ca5dae9",
            valid="git-sha1:2b3d6c16b83e76eca6f8f8da45e85f43a952d68d",
            test="git-sha1:d883dd14704feada9ef4aec37922243bad7e7808",
            entity2id="e66a862431ced658585d66b9df88fd4daba61f1321185d4e6e92d88689108984",
            relation2id="0fdc8e6edea4868deb646b17e4b3e9682b2e28f6bf8c64bc0483cc2dcc2d70d1")),
}


def file_digest(path: str | Path, algorithm: str) -> str:
    """``algorithm:hexdigest`` of a file, for ``sha256`` or ``git-sha1`` (the git blob id)."""
    path = Path(path)
    if algorithm == "sha256":
        return f"sha256:{sha256_file(path)}"
    if algorithm != "git-sha1":
        raise ValueError(f"unknown checksum algorithm {algorithm!r} (sha256, git-sha1)")
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return f"{algorithm}:{h.hexdigest()}"


def missing_message(name: str, raw_dir: str | Path, files: list[str], source: Optional[str]) -> str:
    """What to download and where to put it, for a dataset whose raw files are not there."""
    where = f" from {source}" if source else ""
    return (f"dataset {name}: {', '.join(files)} not found in {raw_dir}. Download {'them' if len(files) > 1 else 'it'}"
            f"{where} into that folder (ingest checks each file's checksum), or point datasets.{name}.raw_dir "
            f"at a folder that has them")
