//! Placeholder replaced below.
import { test } from 'node:test';
test('placeholder', () => {});
