/** Test certificates made by Debian's openssl in a temporary directory. */
import { join } from "node:path";

const OPENSSL = "/usr/bin/openssl";

async function openssl(cwd: string, ...args: string[]): Promise<void> {
  const { code, stderr } = await new Deno.Command(OPENSSL, {
    args,
    cwd,
    stdout: "null",
    stderr: "piped",
  }).output();
  if (code !== 0) {
    throw new Error(
      `openssl ${args.join(" ")} failed: ${new TextDecoder().decode(stderr)}`,
    );
  }
}

/** PEM texts made for one test run. */
export interface Material {
  caCrt: string;
  serverCrt: string;
  serverKey: string;
  otherKey: string;
  rsaCrt: string;
  rsaKey: string;
}

/**
 * Makes, in `dir`, a CA, a server certificate for 127.0.0.1/localhost signed by
 * it (EC P-256, SHA-256), an unrelated key, and an RSA 2048 self-signed pair.
 */
export async function makeMaterial(dir: string): Promise<Material> {
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"];
  await openssl(
    dir,
    "req",
    "-x509",
    ...ec,
    "-sha256",
    "-nodes",
    "-days",
    "2",
    "-subj",
    "/CN=serve test CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
    "-keyout",
    "ca.key",
    "-out",
    "ca.crt",
  );
  await openssl(
    dir,
    "req",
    "-new",
    ...ec,
    "-nodes",
    "-subj",
    "/CN=localhost",
    "-keyout",
    "server.key",
    "-out",
    "server.csr",
  );
  await Deno.writeTextFile(
    join(dir, "server.ext"),
    "subjectAltName=IP:127.0.0.1,DNS:localhost\n" +
      "basicConstraints=critical,CA:FALSE\n" +
      "keyUsage=critical,digitalSignature\n" +
      "extendedKeyUsage=serverAuth\n",
  );
  await openssl(
    dir,
    "x509",
    "-req",
    "-in",
    "server.csr",
    "-CA",
    "ca.crt",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-sha256",
    "-days",
    "2",
    "-extfile",
    "server.ext",
    "-out",
    "server.crt",
  );
  await openssl(
    dir,
    "genpkey",
    "-algorithm",
    "EC",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-out",
    "other.key",
  );
  await openssl(
    dir,
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-sha256",
    "-nodes",
    "-days",
    "2",
    "-subj",
    "/CN=localhost",
    "-addext",
    "subjectAltName=IP:127.0.0.1,DNS:localhost",
    "-keyout",
    "rsa.key",
    "-out",
    "rsa.crt",
  );
  const read = (name: string) => Deno.readTextFile(join(dir, name));
  return {
    caCrt: await read("ca.crt"),
    serverCrt: await read("server.crt"),
    serverKey: await read("server.key"),
    otherKey: await read("other.key"),
    rsaCrt: await read("rsa.crt"),
    rsaKey: await read("rsa.key"),
  };
}
