/**
 * The token checks of AuthMiddleware, one family per group, structured like
 * hono's JWT middleware tests: algorithm confusion, signatures, claims and
 * malformed tokens. Every refusal checks the whole answer (401, `text/plain`,
 * `Unauthorized`, `WWW-Authenticate: Bearer`), that the protected handler
 * never ran, and that the log line names the reason but never the token.
 * The case numbers are those of docs/security.md, "Token checks, case by case".
 */
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import { AuthMiddleware } from "../../src/web.ts";
import { base64url, encodeJwt, hmac, signJwt } from "../support/jwt_encoder.ts";
import {
  assertAccepted,
  assertUnauthorized,
  ATTACKER_SECRET,
  bearer,
  claims,
  forge,
  forgeParts,
  ISSUER,
  mint,
  nowSeconds,
  refuseBearer,
  SECRET,
  segments,
  textEncoder,
  without,
} from "../support/auth_probe.ts";

// ---------------------------------------------------------------------------
// Algorithm confusion

Deno.test("Algorithm confusion attack prevention", async (t) => {
  for (const alg of ["none", "None", "NONE", "nOnE"]) {
    await t.step(`case 4: alg ${alg} without a signature`, async () => {
      const token = await encodeJwt({
        header: { json: { alg, typ: "JWT" } },
        payload: { json: claims() },
      });
      await refuseBearer(token, /alg/);
    });
    await t.step(`case 4: alg ${alg} with a signature`, async () => {
      const token = await forge({ alg, typ: "JWT" }, claims());
      await refuseBearer(token, /alg/);
    });
  }

  for (
    const [alg, hash] of [["HS256", "SHA-256"], ["HS384", "SHA-384"]] as const
  ) {
    await t.step(
      `case 5: ${alg} signed with the real secret (downgrade)`,
      async () => {
        const token = await signJwt(
          { alg, typ: "JWT" },
          claims(),
          SECRET,
          hash,
        );
        await refuseBearer(token, new RegExp(`alg ${alg} not allowed`));
      },
    );
  }

  await t.step(
    "case 5: HS256 minted by jose with the real secret",
    async () => {
      const token = await new SignJWT(claims())
        .setProtectedHeader({ alg: "HS256" })
        .sign(textEncoder.encode(SECRET));
      await refuseBearer(token, /alg HS256 not allowed/);
    },
  );

  for (const alg of ["RS256", "ES256", "PS256"]) {
    await t.step(
      `case 6: ${alg} header, HMAC-signed with the secret (key confusion)`,
      async () => {
        const token = await signJwt({ alg }, claims(), SECRET, "SHA-256");
        await refuseBearer(token, new RegExp(`alg ${alg} not allowed`));
      },
    );
  }

  await t.step("case 7: alg missing", async () => {
    await refuseBearer(await forge({ typ: "JWT" }, claims()), /alg missing/);
  });

  for (const alg of [512, null, ["HS512"], { name: "HS512" }, true]) {
    await t.step(
      `case 7: alg not a string (${JSON.stringify(alg)})`,
      async () => {
        await refuseBearer(
          await forge({ alg }, claims()),
          /alg missing or not a string/,
        );
      },
    );
  }

  await t.step(
    "alg with a lookalike spelling (hs512, HS512 with a space)",
    async () => {
      await refuseBearer(await forge({ alg: "hs512" }, claims()), /alg/);
      await refuseBearer(await forge({ alg: "HS512 " }, claims()), /alg/);
    },
  );

  const keyPickers: Record<string, unknown> = {
    kid: "attacker-key",
    jku: "https://attacker.example/jwks.json",
    x5u: "https://attacker.example/cert.pem",
    jwk: { kty: "oct", k: base64url(ATTACKER_SECRET) },
    x5c: ["MIIBszCCAVmgAwIBAgIUattacker"],
  };
  for (const [name, value] of Object.entries(keyPickers)) {
    await t.step(
      `case 13: ${name} header pointing at the attacker's key is ignored`,
      async () => {
        const token = await signJwt(
          { alg: "HS512", [name]: value },
          claims(),
          ATTACKER_SECRET,
        );
        await refuseBearer(token, /signature/);
      },
    );
  }

  await t.step(
    "case 13: kid/jku/x5u/jwk/x5c do not stop a correctly signed token",
    async () => {
      await assertAccepted(
        bearer(await forge({ alg: "HS512", ...keyPickers }, claims())),
      );
    },
  );

  await t.step("case 14: crit with an unknown name", async () => {
    const token = await forge(
      { alg: "HS512", crit: ["urn:example:unknown"], "urn:example:unknown": 1 },
      claims(),
    );
    await refuseBearer(token, /crit/);
  });

  await t.step(
    "case 14: b64 false (with crit, as RFC 7797 writes it)",
    async () => {
      const token = await forge(
        { alg: "HS512", b64: false, crit: ["b64"] },
        claims(),
      );
      await refuseBearer(token, /crit|b64/);
    },
  );

  await t.step("case 14: b64 false without crit", async () => {
    await refuseBearer(
      await forge({ alg: "HS512", b64: false }, claims()),
      /b64/,
    );
  });
});

// ---------------------------------------------------------------------------
// Signatures

Deno.test("signature", async (t) => {
  const [header, payload, signature] = segments(await mint());

  await t.step("case 8: a bad signature (one character changed)", async () => {
    const middle = Math.floor(signature.length / 2);
    const flipped = signature[middle] === "A" ? "B" : "A";
    const bad = signature.slice(0, middle) + flipped +
      signature.slice(middle + 1);
    await refuseBearer(`${header}.${payload}.${bad}`, /signature/);
  });

  await t.step("case 8: a truncated signature", async () => {
    await refuseBearer(
      `${header}.${payload}.${signature.slice(0, 43)}`,
      /signature/,
    );
  });

  await t.step("case 8: an empty signature", async () => {
    await refuseBearer(`${header}.${payload}.`, /empty signature/);
  });

  await t.step("case 8: a payload edited after signing", async () => {
    const edited = base64url(JSON.stringify(claims({ sub: "admin" })));
    await refuseBearer(`${header}.${edited}.${signature}`, /signature/);
  });

  await t.step("case 8: a signature made with another secret", async () => {
    const other = await hmac(`${header}.${payload}`, ATTACKER_SECRET);
    await refuseBearer(`${header}.${payload}.${other}`, /signature/);
  });
});

// ---------------------------------------------------------------------------
// Claims

Deno.test("claims", async (t) => {
  const header = { alg: "HS512", typ: "JWT" };

  await t.step("case 9: exp missing", async () => {
    await refuseBearer(await forge(header, without(claims(), "exp")), /exp/);
  });

  await t.step("case 9: exp a string", async () => {
    await refuseBearer(
      await forge(header, claims({ exp: String(nowSeconds() + 300) })),
      /exp/,
    );
  });

  await t.step("case 9: exp Infinity (1e400)", async () => {
    const text = JSON.stringify(without(claims(), "exp")).replace(
      /\}$/,
      ',"exp":1e400}',
    );
    await refuseBearer(
      await forgeParts({ json: header }, { text }),
      /exp is not a finite number/,
    );
  });

  await t.step("case 9: exp in the past", async () => {
    await refuseBearer(
      await forge(header, claims({ exp: nowSeconds() - 60 })),
      /exp/,
    );
  });

  await t.step("case 9: exp equal to now", async () => {
    await refuseBearer(
      await forge(header, claims({ exp: nowSeconds() })),
      /exp/,
    );
  });

  await t.step("case 10: nbf in the future", async () => {
    await refuseBearer(
      await forge(header, claims({ nbf: nowSeconds() + 60 })),
      /nbf/,
    );
  });

  await t.step("case 10: iat in the future", async () => {
    await refuseBearer(
      await forge(header, claims({ iat: nowSeconds() + 60 })),
      /iat/,
    );
  });

  await t.step(
    "leewaySeconds tolerates small skew, and only when configured",
    async () => {
      const lenient = new AuthMiddleware({
        secret: SECRET,
        issuer: ISSUER,
        leewaySeconds: 30,
      });
      const skewed = await forge(
        header,
        claims({
          exp: nowSeconds() - 10,
          nbf: nowSeconds() + 10,
          iat: nowSeconds() + 10,
        }),
      );
      await assertAccepted(bearer(skewed), lenient);
      await refuseBearer(skewed);
      const tooSkewed = await forge(header, claims({ exp: nowSeconds() - 60 }));
      await assertUnauthorized(bearer(tooSkewed), {
        auth: lenient,
        token: tooSkewed,
      });
    },
  );

  await t.step("case 11: aud missing", async () => {
    await refuseBearer(await forge(header, without(claims(), "aud")), /aud/);
  });

  for (const aud of [[], ["x"], "Nexus", "nexus "]) {
    await t.step(`case 11: aud ${JSON.stringify(aud)}`, async () => {
      await refuseBearer(await forge(header, claims({ aud })), /aud/);
    });
  }

  await t.step('case 11: aud ["x","nexus"] is accepted', async () => {
    await assertAccepted(
      bearer(await forge(header, claims({ aud: ["x", "nexus"] }))),
    );
  });

  await t.step("audience option replaces nexus", async () => {
    const custom = new AuthMiddleware({
      secret: SECRET,
      issuer: ISSUER,
      audience: "ops",
    });
    await assertAccepted(bearer(await mint({ aud: "ops" })), custom);
    const token = await mint();
    await assertUnauthorized(bearer(token), { auth: custom, token });
  });

  for (
    const [label, iss] of [
      ["another case", ISSUER.toUpperCase()],
      ["extra spaces", ` ${ISSUER} `],
      ["a trailing space", `${ISSUER} `],
      ["another value", "https://evil.example/realms/main"],
    ] as const
  ) {
    await t.step(`case 12: iss with ${label}`, async () => {
      await refuseBearer(await forge(header, claims({ iss })), /iss/);
    });
  }

  await t.step("case 12: iss missing", async () => {
    await refuseBearer(await forge(header, without(claims(), "iss")), /iss/);
  });

  for (const payload of [[claims()], 42, null]) {
    await t.step(
      `case 17: payload ${
        JSON.stringify(payload)?.slice(0, 6)
      }… (not an object)`,
      async () => {
        await refuseBearer(await forge(header, payload), /Claims Set|object/);
      },
    );
  }
});

// ---------------------------------------------------------------------------
// Malformed tokens

Deno.test("malformed tokens", async (t) => {
  const [header, payload, signature] = segments(await mint());

  await t.step(
    "case 15: over 8 KiB, even though correctly signed",
    async () => {
      const big = await mint({ pad: "p".repeat(8 * 1024) });
      assert.ok(big.length > 8 * 1024);
      await refuseBearer(big, /longer than 8192 bytes/);
    },
  );

  for (const char of ["+", "/", "="]) {
    await t.step(`case 15: a "${char}" (outside base64url)`, async () => {
      await refuseBearer(
        `${header}.${payload}${char}.${signature}`,
        /outside base64url/,
      );
    });
  }

  await t.step("case 15: a space inside the token", async () => {
    await refuseBearer(
      `${header}.${payload} .${signature}`,
      /outside base64url/,
    );
  });

  await t.step("case 15: bad JSON in the header", async () => {
    const token = await forgeParts({ text: '{"alg":"HS512"' }, {
      json: claims(),
    });
    await refuseBearer(token, /header is not valid JSON/);
  });

  await t.step("case 15: bad JSON in the payload", async () => {
    const token = await forgeParts({ json: { alg: "HS512" } }, {
      text: '{"exp":',
    });
    await refuseBearer(token, /Claims Set/);
  });

  await t.step("case 15: bad UTF-8 in the header", async () => {
    const token = await forgeParts(
      { bytes: new Uint8Array([0x7b, 0xc3, 0x28, 0x7d]) },
      { json: claims() },
    );
    await refuseBearer(token, /header is not valid UTF-8/);
  });

  await t.step("case 15: bad UTF-8 in the payload", async () => {
    const text = JSON.stringify(claims({ sub: "X" }));
    const bytes = textEncoder.encode(text);
    const index = text.indexOf('"X"') + 1;
    bytes[index] = 0xff; // a lone byte that UTF-8 never uses
    const token = await forgeParts({ json: { alg: "HS512" } }, { bytes });
    await refuseBearer(token, /Claims Set/);
  });

  await t.step("case 16: 1 segment", async () => {
    await refuseBearer(header, /1 segment/);
  });

  await t.step("case 16: 2 segments", async () => {
    await refuseBearer(`${header}.${payload}`, /2 segment/);
  });

  await t.step("case 16: 4 segments", async () => {
    await refuseBearer(
      `${header}.${payload}.${signature}.${signature}`,
      /4 segment/,
    );
  });

  await t.step("case 16: 5 segments (a JWE)", async () => {
    const jweHeader = base64url(JSON.stringify({ alg: "dir", enc: "A256GCM" }));
    await refuseBearer(
      `${jweHeader}..${base64url("iv-iv-iv-iv")}.${payload}.${
        base64url("tag")
      }`,
      /JWE/,
    );
  });

  await t.step(
    "case 16: the empty string (Authorization: Bearer with nothing)",
    async () => {
      await assertUnauthorized(
        new Request("http://localhost/models", {
          headers: { authorization: "Bearer " },
        }),
        { reason: /without a token/ },
      );
    },
  );
});
