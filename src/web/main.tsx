import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { BrowserRouter } from 'react-router';
import { ApiError } from './api/api-client';
import { SessionProvider } from './api/session';
import { App } from './app';
import './styles.css';

const client = new QueryClient({
  defaultOptions: {
    queries: {
      // Fresh until an event says otherwise (live-events.tsx); a refused request is not tried again.
      staleTime: 30_000,
      retry: (n, err) => !(err instanceof ApiError && err.status >= 400 && err.status < 500 && err.status !== 429) && n < 3,
      refetchOnWindowFocus: false,
    },
  },
});

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <QueryClientProvider client={client}>
      <BrowserRouter>
        <SessionProvider>
          <App />
        </SessionProvider>
      </BrowserRouter>
    </QueryClientProvider>
  </StrictMode>,
);
