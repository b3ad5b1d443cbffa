// index.d.ts is written by hand: it must declare every value the module exports, and no
// value it does not.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import * as client from "../src/index.js";

test("index.d.ts declares exactly the values index.js exports", () => {
  const text = readFileSync(new URL("../src/index.d.ts", import.meta.url), "utf8");
  const declared = [...text.matchAll(/^export (?:declare )?(?:const|function|class) (\w+)/gm)].map((m) => m[1]);
  assert.deepEqual([...new Set(declared)].sort(), Object.keys(client).sort());
});
