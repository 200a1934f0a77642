/**
 * A strict little XML reader for tests of what Gantry writes by hand (the `gantry sim` chart):
 * elements, attributes in quotes, text, the five predefined entities and numeric ones; it throws
 * on anything malformed (an unclosed or mismatched tag, a bare `&` or `<`, an attribute twice, a
 * second root). No DTDs, processing instructions or CDATA: what we write has none.
 */
export interface XmlElement {
  name: string;
  attrs: Record<string, string>;
  children: XmlElement[];
  /** The text directly inside, entities decoded. */
  text: string;
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

const isNameChar = (c: string) =>
  (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c === '-' || c === '_' || c === ':' || c === '.';
const isSpace = (c: string) => c === ' ' || c === '\n' || c === '\t' || c === '\r';

export function parseXml(text: string): XmlElement {
  let i = 0;
  const fail = (why: string): never => {
    const line = text.slice(0, i).split('\n').length;
    throw new Error(`XML line ${line}: ${why}`);
  };
  const skipSpace = () => {
    while (i < text.length && isSpace(text[i]!)) i++;
  };
  const name = () => {
    const start = i;
    while (i < text.length && isNameChar(text[i]!)) i++;
    if (i === start) fail(`a name expected at "${text.slice(i, i + 10)}"`);
    return text.slice(start, i);
  };
  const decode = (raw: string): string => {
    let out = '';
    for (let k = 0; k < raw.length; k++) {
      const c = raw[k]!;
      if (c === '<') fail('a bare "<" in text or an attribute');
      if (c !== '&') {
        out += c;
        continue;
      }
      const end = raw.indexOf(';', k);
      if (end < 0) fail('a bare "&"');
      const ref = raw.slice(k + 1, end);
      if (ref.startsWith('#x')) out += String.fromCodePoint(parseInt(ref.slice(2), 16));
      else if (ref.startsWith('#')) out += String.fromCodePoint(Number(ref.slice(1)));
      else if (Object.hasOwn(ENTITIES, ref)) out += ENTITIES[ref];
      else fail(`unknown entity &${ref};`);
      k = end;
    }
    return out;
  };
  const element = (): XmlElement => {
    if (text[i] !== '<') fail('"<" expected');
    i++;
    const el: XmlElement = { name: name(), attrs: {}, children: [], text: '' };
    for (;;) {
      skipSpace();
      if (text.startsWith('/>', i)) {
        i += 2;
        return el;
      }
      if (text[i] === '>') {
        i++;
        break;
      }
      const attr = name();
      skipSpace();
      if (text[i] !== '=') fail(`"=" expected after attribute ${attr}`);
      i++;
      skipSpace();
      const quote = text[i];
      if (quote !== '"' && quote !== "'") fail(`attribute ${attr} is not quoted`);
      const end = text.indexOf(quote!, i + 1);
      if (end < 0) fail(`attribute ${attr} is not closed`);
      if (Object.hasOwn(el.attrs, attr)) fail(`attribute ${attr} twice on <${el.name}>`);
      el.attrs[attr] = decode(text.slice(i + 1, end));
      i = end + 1;
    }
    for (;;) {
      const lt = text.indexOf('<', i);
      if (lt < 0) fail(`<${el.name}> is not closed`);
      el.text += decode(text.slice(i, lt));
      i = lt;
      if (text.startsWith('</', i)) {
        i += 2;
        const closing = name();
        if (closing !== el.name) fail(`</${closing}> closes <${el.name}>`);
        skipSpace();
        if (text[i] !== '>') fail('">" expected');
        i++;
        return el;
      }
      el.children.push(element());
    }
  };
  if (text.startsWith('<?xml')) {
    const end = text.indexOf('?>');
    if (end < 0) fail('the XML declaration is not closed');
    i = end + 2;
  }
  skipSpace();
  const root = element();
  skipSpace();
  if (i !== text.length) fail('content after the root element');
  return root;
}

/** Every element under `root` (itself included), depth first. */
export function allElements(root: XmlElement): XmlElement[] {
  return [root, ...root.children.flatMap(allElements)];
}

/** The text of an element and of everything inside it. */
export function textOf(el: XmlElement): string {
  return el.text + el.children.map(textOf).join('');
}
