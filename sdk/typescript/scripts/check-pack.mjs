// Fails unless `npm pack` would publish an installable package: the built dist/ (what "main",
// "types" and "exports" point at), package.json and README.md, and nothing else (no src/, test/,
// node_modules/). It lists the tarball's files with `npm pack --dry-run --json --ignore-scripts`,
// so run it after `npm run build` (`npm test` does; `npm pack` itself builds first, through the
// "prepare" script), then imports dist/index.js to check that the build loads.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const problems = [];

if (!/\bbuild\b/.test(pkg.scripts?.prepare ?? "")) {
  problems.push(`the "prepare" script must run the build (so that npm pack packs a fresh dist/), got: ${pkg.scripts?.prepare}`);
}

const run = spawnSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: root, encoding: "utf8" });
if (run.status !== 0) {
  console.error(`check-pack: npm pack --dry-run failed (exit ${run.status}):\n${run.stdout}${run.stderr}`);
  process.exit(2);
}
const [info] = JSON.parse(run.stdout);
const files = info.files.map((f) => f.path).sort();

const strip = (p) => p.replace(/^\.\//, "");
const wanted = new Set(["package.json", "README.md", "dist/schema.d.ts", strip(pkg.main), strip(pkg.types)]);
for (const target of Object.values(pkg.exports?.["."] ?? {})) wanted.add(strip(target));
for (const f of wanted) {
  if (!files.includes(f)) problems.push(`${f} is not in the tarball (run \`npm run build\` first?)`);
}
for (const f of files) {
  if (!(f.startsWith("dist/") || ["package.json", "README.md", "LICENSE"].includes(f))) {
    problems.push(`${f} should not be in the tarball`);
  }
}

try {
  const sdk = await import(pathToFileURL(join(root, strip(pkg.main))).href);
  for (const name of ["createLeasegateClient", "lock", "Lease", "acquireSemaphore", "SemaphoreLease", "lockAll", "MultiLockLease", "campaign", "Leadership", "observe", "LeaseLostError", "LeasegateProblemError"]) {
    if (sdk[name] === undefined) problems.push(`${pkg.main} does not export ${name}`);
  }
} catch (e) {
  problems.push(`importing ${pkg.main} failed: ${e}`);
}

if (problems.length > 0) {
  console.error(`check-pack: ${info.filename} is not installable as is:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(`check-pack: ${info.filename} (${info.size} bytes) holds ${files.join(", ")}`);
