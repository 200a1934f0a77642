import { concurrentConformance } from '../conformance/concurrent-conformance.js';
import { storeConformance } from '../conformance/store-conformance.js';
import { openSqliteStore } from './open-sqlite-store.js';

storeConformance('sqlite', () => openSqliteStore(':memory:'));
concurrentConformance('sqlite', () => openSqliteStore(':memory:'));
