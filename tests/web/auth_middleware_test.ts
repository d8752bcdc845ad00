/** Rotating the production secret (AuthMiddleware.rotateSecret), without sockets. */
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import { AuthConfigError, AuthMiddleware } from "../../src/web.ts";

const ISSUER = "https://idp.example";
const OLD = "old-secret-".repeat(7);
const NEW = "new-secret-".repeat(7);

function token(secret: string): Promise<string> {
  return new SignJWT({ aud: "nexus", iss: ISSUER })
    .setProtectedHeader({ alg: "HS512" })
    .setIssuedAt()
    .setExpirationTime("5m")
    .sign(new TextEncoder().encode(secret));
}

async function status(
  handler: (req: Request) => Response | Promise<Response>,
  bearer: string,
): Promise<number> {
  const response = await handler(
    new Request("http://localhost/models", {
      headers: { authorization: `Bearer ${bearer}` },
    }),
  );
  await response.body?.cancel();
  return response.status;
}

Deno.test("rotateSecret: tokens of the old secret are refused at once, even remembered ones; new ones pass", async () => {
  const auth = new AuthMiddleware({ secret: OLD, issuer: ISSUER });
  let ran = 0;
  const handler = auth.wrap(() => {
    ran++;
    return new Response("ok");
  });
  const old = await token(OLD);
  assert.equal(await status(handler, old), 200);
  assert.equal(await status(handler, old), 200, "remembered");
  auth.rotateSecret(NEW);
  assert.equal(await status(handler, old), 401);
  assert.equal(await status(handler, await token(NEW)), 200);
  assert.equal(ran, 3, "the handler never ran for the refused token");
  assert.equal(auth.failures.signature, 1);
});

Deno.test("rotateSecret refuses an empty secret and the development pass-through", () => {
  const auth = new AuthMiddleware({ secret: OLD, issuer: ISSUER });
  assert.throws(() => auth.rotateSecret(""), AuthConfigError);
  assert.throws(
    () => AuthMiddleware.development().rotateSecret(NEW),
    /Cannot rotate the JWT secret: authentication is off/,
  );
});
