// Fails when src/schema.d.ts is not what `npm run generate` makes from ../../openapi.yaml now.
// It runs the `generate` script's own command (from package.json), writing into a temporary
// file instead of src/schema.d.ts, and compares the two byte for byte.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const committed = "src/schema.d.ts";
const generate = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).scripts.generate;
if (!generate.includes(`-o ${committed}`)) {
  console.error(`check-generated: the "generate" script must write with "-o ${committed}", got: ${generate}`);
  process.exit(2);
}

const dir = mkdtempSync(join(tmpdir(), "leasegate-schema-"));
try {
  const fresh = join(dir, "schema.d.ts");
  const cmd = generate.replace(`-o ${committed}`, `-o ${JSON.stringify(fresh)}`);
  // npm puts node_modules/.bin on PATH for scripts, so the same command resolves here.
  const run = spawnSync(cmd, { cwd: root, shell: true, encoding: "utf8" });
  if (run.status !== 0) {
    console.error(`check-generated: "${cmd}" failed (exit ${run.status}):\n${run.stdout}${run.stderr}`);
    process.exit(2);
  }
  const want = readFileSync(fresh, "utf8");
  let have;
  try {
    have = readFileSync(join(root, committed), "utf8");
  } catch {
    have = null;
  }
  if (have !== want) {
    const haveLines = (have ?? "").split("\n");
    const wantLines = want.split("\n");
    let line = 0;
    while (line < haveLines.length && haveLines[line] === wantLines[line]) line++;
    console.error(
      `check-generated: ${committed} is out of date with ../../openapi.yaml` +
        (have === null ? " (it is missing)" : ` (first difference at line ${line + 1})`) +
        `.\n  committed: ${JSON.stringify(haveLines[line] ?? "<end of file>")}` +
        `\n  generated: ${JSON.stringify(wantLines[line] ?? "<end of file>")}` +
        `\nRun \`npm run generate\` in sdk/typescript and commit ${committed}.`,
    );
    process.exit(1);
  }
  console.log(`check-generated: ${committed} is up to date with ../../openapi.yaml`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
