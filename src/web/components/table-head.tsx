/** A table's header row: its columns' names, `num` ones aligned right. */
export function TableHead({ columns, num = [] }: { columns: string[]; num?: string[] }) {
  return (
    <thead>
      <tr>
        {columns.map((c) => (
          <th key={c} className={num.includes(c) ? 'num' : undefined}>
            {c}
          </th>
        ))}
      </tr>
    </thead>
  );
}
