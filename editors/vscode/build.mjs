// Bundles the extension (Node, CommonJS) and the panel's webview script (browser, IIFE) with
// esbuild, and copies the webview's stylesheet and the codicons into dist/.
//   node build.mjs               development build
//   node build.mjs --production  minified, for the .vsix
//   node build.mjs --tests       only the unit tests and the end-to-end driver, into dist-test/
import * as esbuild from 'esbuild';
import { cpSync, mkdirSync, readdirSync, rmSync } from 'node:fs';

const production = process.argv.includes('--production');
const tests = process.argv.includes('--tests');
const common = { bundle: true, sourcemap: !production, minify: production, logLevel: 'warning' };

if (tests) {
  rmSync('dist-test', { recursive: true, force: true });
  const unit = readdirSync('test/unit').filter((f) => f.endsWith('.test.ts')).map((f) => `test/unit/${f}`);
  await esbuild.build({
    ...common,
    entryPoints: [...unit, 'test/e2e/e2e.ts'],
    outdir: 'dist-test',
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    external: ['playwright-core'],
  });
  process.exit(0);
}

rmSync('dist', { recursive: true, force: true });
mkdirSync('dist/codicons', { recursive: true });
await esbuild.build({
  ...common,
  entryPoints: ['src/extension.ts'],
  outfile: 'dist/extension.js',
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  external: ['vscode'],
});
await esbuild.build({
  ...common,
  entryPoints: ['webview/main.ts'],
  outfile: 'dist/webview.js',
  platform: 'browser',
  format: 'iife',
  target: 'es2022',
});
cpSync('webview/style.css', 'dist/webview.css');
for (const file of ['codicon.css', 'codicon.ttf']) {
  cpSync(`node_modules/@vscode/codicons/dist/${file}`, `dist/codicons/${file}`);
}

