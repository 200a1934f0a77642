import { busConformance } from './bus-conformance.js';
import { MemoryBus } from './memory-bus.js';

busConformance('memory', {
  async open() {
    const bus = new MemoryBus();
    return [bus, bus];
  },
});
