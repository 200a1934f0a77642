import { describe, expect, it } from 'vitest';
import { serverList } from './server-list.js';

describe('serverList', () => {
  it('splits on commas, trims, drops trailing slashes and empty entries', () => {
    expect(serverList(' https://a:7070/, https://b:7070//,, ')).toEqual(['https://a:7070', 'https://b:7070']);
    expect(serverList('http://127.0.0.1:7070')).toEqual(['http://127.0.0.1:7070']);
    expect(serverList(' , ')).toEqual([]);
  });
});
