// Builds the server binary once for a test run (npm test runs this first);
// the test files start it with harness/server.js. With SHARELOG_SERVER_BIN
// set, that binary is used and nothing is built.
import { buildServer } from './server.js';

if (process.env.SHARELOG_SERVER_BIN) {
  console.log(`using the server binary ${process.env.SHARELOG_SERVER_BIN}`);
} else {
  console.log(`built ${buildServer()}`);
}
