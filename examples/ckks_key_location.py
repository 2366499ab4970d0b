"""Where does the CKKS secret key live? One aggregation, inspected from every party's side.

Runs a real CKKS aggregation (TenSEAL) of 4 clients' random vectors and prints, for the server and for each
client, whether it holds a context with a secret key; what the server received (one public context, the
ciphertexts, the decoded sum) and that it cannot decrypt an upload with what it holds. With ``--save-key PATH``
the key generator also writes its secret context to PATH (mode 0600), the only way a key reaches the disk.

    python examples/ckks_key_location.py
"""

from __future__ import annotations

import argparse
import os
import stat
import tempfile
from pathlib import Path

import numpy as np
import tenseal as ts

from securefgl.protocols import BlockSpec, SumSchema
from securefgl.protocols.base import SERVER, Transcript
from securefgl.protocols.ckks import CKKSAggregation, CKKSClient, CKKSKeys, CKKSServer, CKKSUpload
from securefgl.protocols.messages import decode
from securefgl.protocols.router import Router


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--length", type=int, default=10_000)
    ap.add_argument("--save-key", type=Path, default=None, help="write the secret context here (mode 0600)")
    args = ap.parse_args()

    schema = SumSchema([BlockSpec("x", (args.length,), bound=1.0)], max_clients=max(args.clients, 4))
    rng = np.random.default_rng(0)
    contribs = {c: {"x": rng.uniform(-1, 1, args.length)} for c in range(args.clients)}
    proto = CKKSAggregation()
    params = proto.parameters(schema)
    clients = tuple(sorted(contribs))
    transcript = Transcript(protocol="ckks", invited=clients)
    server = CKKSServer(schema, params, clients, 0, None, "all", None, transcript)
    parties = {c: CKKSClient(c, schema, params, contribs[c], 0, b"") for c in clients}
    Router(transcript).run(server, parties)

    print(
        f"CKKS N={params.poly_modulus_degree}, primes {params.coeff_mod_bit_sizes}, scale 2^{params.scale_bits}"
    )
    print(f"key generator: client {server.generator}; decryptor: client {server.decryptor}")
    ctx = server.public_context
    assert ctx is not None
    print(
        f"server context: is_private={ctx.is_private()} has_secret_key={ctx.has_secret_key()} "
        f"galois={ctx.has_galois_keys()} relin={ctx.has_relin_keys()} "
        f"({len(ctx.serialize())} bytes serialised)"
    )
    for c, p in parties.items():
        print(f"client {c}: holds a secret key after the round: {p.holds_secret_key}")
    for p in parties.values():
        p.forget()
    print(
        f"after forget(): any client holds a secret key: {any(p.holds_secret_key for p in parties.values())}"
    )

    received = transcript.view(SERVER)
    keys = [decode(m.payload, CKKSKeys) for m in received if m.phase == "keys"]
    pubs = [ts.context_from(k.public_context) for k in keys]
    print(
        f"server received {len(received)} messages; contexts among them: {len(pubs)}, "
        f"any with a secret key: {any(p.has_secret_key() for p in pubs)}"
    )
    upload = decode(next(m for m in received if m.phase == "upload").payload, CKKSUpload)
    try:
        ts.ckks_vector_from(pubs[0], upload.ciphertexts[0][1]).decrypt()
        print("server decrypted an upload: THIS SHOULD NOT HAPPEN")
    except ValueError as exc:
        print(f"server tries to decrypt client upload 0 with what it holds -> ValueError: {exc}")
    assert server.sums is not None
    truth = sum(v["x"] for v in contribs.values())
    err = float(np.abs(np.asarray(server.sums["x"]) - truth).max())
    print(f"released sum: max abs error {err:.2e} against the true sum")

    if args.save_key is not None:
        CKKSAggregation(save_secret_key=args.save_key).aggregate(schema, contribs)
        mode = stat.S_IMODE(os.stat(args.save_key).st_mode)
        print(f"secret context written on request to {args.save_key} with mode {mode:04o}")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "ckks-secret.bin"
            CKKSAggregation(save_secret_key=path).aggregate(schema, contribs)
            print(f"(with --save-key: the key file gets mode {stat.S_IMODE(os.stat(path).st_mode):04o})")


if __name__ == "__main__":
    main()
