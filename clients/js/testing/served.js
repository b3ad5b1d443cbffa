// A real `onejob serve` (SQLite, the bundled simulator) for the JS client's tests.
//
// Starts tests/integration/clients/served_gateway.py with the repository's Python (the
// ONEJOB_PYTHON environment variable, else .venv/bin/python at the repository's root),
// which serves the gateway from its CLI on free ports, makes an API key and certifies
// both simulated providers, then prints one JSON line. Closing its stdin stops it.

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const SCRIPT = path.join(ROOT, "tests/integration/clients/served_gateway.py");
const START_TIMEOUT_MS = 120_000;

export const CONTRACT = "ticket-triage@1";
export const TICKET = Object.freeze({
  ticket_id: "SUP-42",
  channel: "email",
  customer: { name: "Priya", plan: "pro" },
  subject: "Charged twice",
  body: "My card was charged twice for March.",
});

function python() {
  if (process.env.ONEJOB_PYTHON) return process.env.ONEJOB_PYTHON;
  const venv = path.join(ROOT, ".venv/bin/python");
  return existsSync(venv) ? venv : "python3";
}

/** Start the stack; resolve to {gateway, simulator, key, stop(), simCalls(), ...}. */
export async function startStack() {
  const dir = mkdtempSync(path.join(tmpdir(), "onejob-js-"));
  const child = spawn(python(), [SCRIPT, dir], { cwd: ROOT, stdio: ["pipe", "pipe", "inherit"] });
  const line = await new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error("the gateway did not start in time")), START_TIMEOUT_MS);
    child.stdout.on("data", (data) => {
      out += data;
      const end = out.indexOf("\n");
      if (end !== -1) {
        clearTimeout(timer);
        resolve(out.slice(0, end));
      }
    });
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${python()}: ${error.message} (set ONEJOB_PYTHON)`));
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`served_gateway.py exited with ${code}; see ${dir}/gateway.log`));
    });
  });
  const info = JSON.parse(line);
  const auth = { Authorization: `Bearer ${info.key}` };
  return {
    ...info,
    dir,
    async stop() {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.stdin.end();
      await exited;
    },
    /** The simulator's call log, or the calls made for one job's attempts. */
    async simCalls(jobId) {
      const { calls } = await (await fetch(`${info.simulator}/_sim/calls`)).json();
      return jobId ? calls.filter((c) => String(c.idempotency_key).startsWith(`${jobId}/`)) : calls;
    },
    async simScript(provider, ...behaviours) {
      const response = await fetch(`${info.simulator}/_sim/script`, {
        method: "POST",
        body: JSON.stringify({ provider, behaviours }),
      });
      if (!response.ok) throw new Error(`script: ${response.status}`);
    },
    async simReset() {
      await fetch(`${info.simulator}/_sim/reset`, { method: "POST" });
    },
    /** Ids of alice's newest jobs (up to 100). */
    async jobIds() {
      const response = await fetch(`${info.gateway}/v1/jobs?limit=100`, { headers: auth });
      return new Set((await response.json()).jobs.map((j) => j.id));
    },
  };
}
